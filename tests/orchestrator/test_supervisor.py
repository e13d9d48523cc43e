"""The supervisor leaves no orphan: a launching process killed by SIGINT or SIGKILL takes the
supervised command and its children down with it.

The command here is a stand-in with vLLM's shape (a server process that spawns a helper in its
own process group, as vLLM's API server spawns its engine core); tests/orchestrator/test_vllm_real.py
does the same with a real vLLM server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from gymfleet.orchestrator.engines.supervisor import SupervisedProcess

pytestmark = pytest.mark.timeout(120)

TREE = textwrap.dedent("""
    import json, subprocess, sys, time
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    json.dump({"server": __import__("os").getpid(), "helper": helper.pid}, open(sys.argv[1], "w"))
    time.sleep(600)
""")

PARENT = textwrap.dedent("""
    import sys, time
    from gymfleet.orchestrator.engines.supervisor import SupervisedProcess
    pids, log = sys.argv[1], sys.argv[2]
    with SupervisedProcess([sys.executable, "-c", sys.argv[3], pids], log, grace_s=2) as proc:
        print(proc.pid, flush=True)
        time.sleep(600)
""")


def _wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _tree_pids(pid_file: Path) -> dict[str, int]:
    assert _wait_for(lambda: pid_file.exists() and pid_file.stat().st_size > 0, 30), "the stand-in server never started"
    time.sleep(0.2)
    return json.loads(pid_file.read_text())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_killing_the_launching_process_leaves_no_orphan(tmp_path: Path, sig: signal.Signals) -> None:
    pid_file = tmp_path / "pids.json"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(pid_file), str(tmp_path / "log"), TREE],
                              stdout=subprocess.PIPE, text=True)
    try:
        supervisor = int(parent.stdout.readline())
        pids = {"supervisor": supervisor, **_tree_pids(pid_file)}
        assert not any(_gone(p) for p in pids.values())
        parent.send_signal(sig)
        parent.wait(timeout=30)
        assert _wait_for(lambda: all(_gone(p) for p in pids.values()), 30), {
            name: pid for name, pid in pids.items() if not _gone(pid)}
    finally:
        parent.kill()


def test_stop_ends_the_whole_group_and_reports_the_status(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids.json"
    with SupervisedProcess([sys.executable, "-c", TREE, str(pid_file)], tmp_path / "log", grace_s=2) as proc:
        pids = _tree_pids(pid_file)
        assert proc.alive()
    assert not proc.alive()
    assert proc.process is not None and proc.process.returncode == 128 + signal.SIGTERM
    assert _wait_for(lambda: all(_gone(p) for p in pids.values()), 10)


def test_a_command_that_exits_takes_its_helpers_along(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids.json"
    crash = TREE.replace("time.sleep(600)\n", "sys.exit(3)\n")
    with SupervisedProcess([sys.executable, "-c", crash, str(pid_file)], tmp_path / "log", grace_s=2) as proc:
        pids = _tree_pids(pid_file)
        assert _wait_for(lambda: not proc.alive(), 20)
    assert proc.process is not None and proc.process.returncode == 3
    assert _wait_for(lambda: _gone(pids["helper"]), 10)


def test_a_killed_supervisor_still_stops_the_command(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids.json"
    proc = SupervisedProcess([sys.executable, "-c", TREE, str(pid_file)], tmp_path / "log", grace_s=2)
    proc.start()
    try:
        pids = _tree_pids(pid_file)
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        # PR_SET_PDEATHSIG: the server (vLLM's API server in real use) gets SIGTERM
        assert _wait_for(lambda: _gone(pids["server"]), 10)
    finally:
        proc.stop()
        for pid in pids.values():
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
