"""Stopping `gymfleet train` as a user does: Ctrl-C (SIGINT to the whole process group, as a
terminal sends it) stops the run as SIGTERM does, and a `gymfleet train` killed outright takes its
learner with it, leaving the run's learner seat free for the rerun. Real CLI, engine, learner,
store and bucket on the echo test env."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

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


def test_ctrl_c_stops_like_sigterm_and_status_agrees_everywhere(tmp_path: Path) -> None:
    # Before: the learner got the terminal's SIGINT too (KeyboardInterrupt traceback, "the learner
    # process died"), and a Ctrl-C on the last step left report.json "interrupted" with the step's
    # row missing while a rerun said "complete".
    run_id = "ctrlc"
    config = tiny_train_config(tmp_path, run_id, budget={"max_steps": 4})
    bucket = AdapterBucket(str(tmp_path / "bucket"), run_id)
    job = train_process(config, own_group=True)
    _wait_for_version(bucket, job, 1)
    _ctrl_c(job)  # mid-run: the learner is alive
    assert _assert_consistent(tmp_path, run_id, config, bucket, 4) == "interrupted"
    # Resume with a budget that the next step spends; Ctrl-C as that last step is published.
    last = bucket.get(bucket.newest_version()).meta["step"] + 1
    job = train_process(config, f"budget.max_steps={last}", own_group=True)
    _wait_for_version(bucket, job, bucket.newest_version() + 1)
    _ctrl_c(job)
    assert _assert_consistent(tmp_path, run_id, config, bucket, last) == "completed (budget)"
