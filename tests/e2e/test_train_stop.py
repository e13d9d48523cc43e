"""Stopping `gymfleet train` as a user does: Ctrl-C (SIGINT to the whole process group, as a
terminal sends it) stops the run as SIGTERM does, and a `gymfleet train` killed outright takes its
learner with it, leaving the run's learner seat free for the rerun. Real CLI, engine, learner,
store and bucket on the echo test env."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.run.config import load_train_config
from gymfleet.run.job import RunCompleteError, _refuse_if_complete
from gymfleet.trainer.bucket import AdapterBucket
from tests.e2e.train_helpers import tiny_train_config, train_process

pytestmark = [pytest.mark.model, pytest.mark.slow]


async def _store_status(store_url: str, run_id: str) -> str:
    async with await TrajectoryStore.open(store_url) as store:
        return (await store.run_summary(run_id)).status


def _wait_for_version(bucket: AdapterBucket, job: subprocess.Popen[str], version: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while (bucket.newest_version() or 0) < version and time.monotonic() < deadline and job.poll() is None:
        time.sleep(0.05)
    assert (bucket.newest_version() or 0) >= version, job.communicate()[0] if job.poll() is not None else "no publish"


def _ctrl_c(job: subprocess.Popen[str]) -> str:
    os.killpg(job.pid, signal.SIGINT)  # the whole foreground group: CLI, learner, engines
    out, _ = job.communicate(timeout=300)
    assert job.returncode == 0, (job.returncode, out)
    assert "Traceback" not in out and "KeyboardInterrupt" not in out and "learner process died" not in out, out
    assert out.count("stopping:") == 1, out
    # piped, the summary stays one line (before, cut at 80 columns: "(last step \n4)")
    assert re.search(r"^run \S+ \(async\): .* learner steps this start \(last step \d+\), policy v\d+, .*"
                     r"zero-variance groups", out, re.M), out
    return out


def _step_rows(report_dir: Path) -> list[int]:
    rows = [json.loads(line) for line in (report_dir / "learner.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if r["event"] == "step"]


def _assert_consistent(tmp_path: Path, run_id: str, config: Path, bucket: AdapterBucket, max_steps: int) -> str:
    """report.json, the store (`runs list`) and a rerun say the same; the last step's row is kept."""
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    newest = bucket.get(bucket.newest_version()).meta["step"]
    assert _step_rows(tmp_path / "report")[-1] == newest == report["last_step"]
    assert report["learner_exitcode"] == 0
    status = asyncio.run(_store_status(str(tmp_path / "store.db"), run_id))
    assert report["run_status"] == status
    complete = newest >= max_steps
    assert status == ("completed (budget)" if complete else "interrupted")
    cfg = load_train_config(config, [f"budget.max_steps={max_steps}"])
    if complete:
        with pytest.raises(RunCompleteError):
            _refuse_if_complete(cfg)
    else:
        _refuse_if_complete(cfg)  # a rerun resumes
    return status


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def test_killed_train_takes_its_learner_and_ctrl_c_on_the_last_step_agrees_everywhere(tmp_path: Path) -> None:
    run_id = "stop"
    config = tiny_train_config(tmp_path, run_id, budget={"max_steps": 4})
    bucket = AdapterBucket(str(tmp_path / "bucket"), run_id)
    # 1. SIGKILL of `gymfleet train`: before, its learner lived on (10+ minutes), renewing the
    # run's seat, and every rerun exited 3 with LearnerBusyError.
    job = train_process(config, own_group=True)
    _wait_for_version(bucket, job, 1)
    learner_pid = int((tmp_path / "report" / "learner.pid").read_text())
    job.kill()
    job.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while _pid_alive(learner_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pid_alive(learner_pid), "the learner outlived its run"
    # 2. The rerun takes the dead learner's seat at once and resumes; a Ctrl-C as its last step is
    # published (the learner still running) stops it as SIGTERM does. Before, the learner got the
    # terminal's SIGINT too (KeyboardInterrupt traceback, "the learner process died"), and a Ctrl-C
    # on the last step left report.json and `runs list` "interrupted" (the step's row missing)
    # while the rerun said "complete".
    last = bucket.get(bucket.newest_version()).meta["step"] + 1
    job = train_process(config, f"budget.max_steps={last}", own_group=True)
    _wait_for_version(bucket, job, bucket.newest_version() + 1)
    _ctrl_c(job)
    assert _assert_consistent(tmp_path, run_id, config, bucket, last) == "completed (budget)"
    # The run's newest version exported: its card names the task, env and instances it trained on.
    exported = CliRunner().invoke(app, ["adapters", "export", "latest", str(tmp_path / "export"), "--run", run_id,
                                        "--bucket", str(tmp_path / "bucket"), "--store", str(tmp_path / "store.db")])
    assert exported.exit_code == 0, exported.output
    card = (tmp_path / "export" / "README.md").read_text()
    assert "| echo | `gymfleet-test/SlowEcho-v0` | `w0" in card, card
