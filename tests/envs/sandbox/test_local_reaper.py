"""Sandboxes nobody owns any more are found and removed: expiry, dead owners, SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gymfleet.core.errors import SandboxError
from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.local import LocalBackend, LocalBackendConfig
from gymfleet.envs.sandbox.local_state import marked_pids, read_records

pytestmark = pytest.mark.bwrap

OWNER = """
import asyncio, json, sys
from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.local import LocalBackend, LocalBackendConfig

async def main():
    backend = LocalBackend(LocalBackendConfig(state_dir=sys.argv[1], allow_unisolated=False))
    sb = backend.create(SandboxSpec(), SandboxLabels(run_id="doomed"))
    await sb.start()
    await sb.exec("sleep 1000 &")
    print(json.dumps({"id": sb.sandbox_id, "host_dir": str(sb.host_dir)}), flush=True)
    await asyncio.sleep(1000)

asyncio.run(main())
"""


def _wait_until(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_sigkilled_owner_takes_its_sandbox_down(
    bwrap_available: bool, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    owner = subprocess.Popen([sys.executable, str(script), str(state_dir)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        started = json.loads(owner.stdout.readline())
        assert marked_pids(started["id"]), "the sandbox's processes should be running"
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
    assert _wait_until(lambda: marked_pids(started["id"]) == []), "--die-with-parent failed"
    assert Path(started["host_dir"]).exists() and len(read_records(state_dir)) == 1
    backend = LocalBackend(LocalBackendConfig(state_dir=state_dir))
    assert backend.swept_at_start == 1
    assert not Path(started["host_dir"]).exists() and read_records(state_dir) == []


async def test_gc_removes_expired_and_by_run(bwrap_available: bool, tmp_path: Path) -> None:
    backend = LocalBackend(LocalBackendConfig(state_dir=tmp_path, allow_unisolated=False))
    expired = backend.create(SandboxSpec(), SandboxLabels(run_id="r1", expires_at=time.time() - 1))
    live = backend.create(SandboxSpec(), SandboxLabels(run_id="r2"))
    async with expired, live:
        await expired.exec("sleep 1000 &")
        assert await backend.gc(run_id="r2") == 0
        assert await backend.gc() == 1
        assert marked_pids(expired.sandbox_id) == []
        with pytest.raises(SandboxError):
            await expired.exec("true")
        assert (await live.exec("echo up")).stdout == "up\n"
        assert await backend.gc(run_id="r2", expired_only=False) == 1
        assert read_records(tmp_path) == []
        with pytest.raises(SandboxError):
            await live.exec("true")
