"""`gymfleet train` end to end on the embedded model: both modes publish and hot-load adapters,
write the report, and a learner killed mid-run resumes from the bucket without training any
group twice. The env is the echo test env (one short turn) so that the run is seconds of
generation; engine, gateway, store, bucket and learner are the real ones."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.trainer.bucket import AdapterBucket
from tests.e2e.train_helpers import run_train, tiny_train_config, train_process

pytestmark = [pytest.mark.model, pytest.mark.slow]


async def _max_generated_version(store_url: str, run_id: str) -> int:
    async with await TrajectoryStore.open(store_url) as store:
        rows = await store.trajectories(run_id, limit=None)
    return max(int(r.trajectory.versions.max()) for r in rows if len(r.trajectory.versions))


async def _run_status(store_url: str, run_id: str) -> str:
    async with await TrajectoryStore.open(store_url) as store:
        return (await store.run_summary(run_id)).status


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_train_smoke_publishes_hot_loads_and_reports(tmp_path: Path, mode: str) -> None:
    # async: a third step leaves time for rollouts started after v1 was loaded to finish.
    n_steps = 3 if mode == "async" else 2
    config = tiny_train_config(tmp_path, f"smoke-{mode}", mode=mode, budget={"max_steps": n_steps})
    code, out = run_train(config, flags=("--report-to", "tensorboard") if mode == "async" else ())
    assert code == 0, out
    assert f"report: {tmp_path / 'report' / 'report.json'}" in out
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["mode"] == mode and report["n_steps"] == n_steps and report["last_step"] == n_steps
    for png in ("reward.png", "learner.png", "staleness.png", "idle.png"):
        assert (tmp_path / "report" / png).stat().st_size > 1000
    assert AdapterBucket(str(tmp_path / "bucket"), f"smoke-{mode}").versions() == list(range(1, n_steps + 1))
    assert [ld["version"] for ld in report["adapter_loads"]] == list(range(1, n_steps + 1))
    assert sum(report["staleness_histogram"].values()) == n_steps * 2 * 2  # steps x 2 groups x G=2
    first = report["steps"][0]
    assert first["mean_ratio"] == pytest.approx(1.0, abs=0.02) and first["masked_fraction"] < 0.05
    assert 0 <= report["learner_idle_fraction"] <= 1 and 0 <= report["generation_idle_fraction"] <= 1
    # The run ended on its budget: "completed (budget)", not "interrupted".
    assert report["run_status"] == "completed (budget)" and f"smoke-{mode} ({mode}): completed (budget)" in out
    assert asyncio.run(_run_status(str(tmp_path / "store.db"), f"smoke-{mode}")) == "completed (budget)"
    # Rollouts started after v1 was hot-loaded are stamped with it.
    assert asyncio.run(_max_generated_version(str(tmp_path / "store.db"), f"smoke-{mode}")) >= 1
    if mode == "async":
        _assert_tensorboard_matches(tmp_path)


def _assert_tensorboard_matches(tmp_path: Path) -> None:
    """--report-to tensorboard: the event files hold the learner's steps and the metrics file's per-task curves."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "report" / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    rows = [json.loads(line) for line in (tmp_path / "report" / "learner.jsonl").read_text().splitlines()]
    assert [(e.step, e.value) for e in acc.Scalars("learner/loss")] == [
        (r["step"], pytest.approx(r["loss"])) for r in rows if r["event"] == "step"] != []
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    # x = rollouts completed less those aborted at the stop (requeued; RolloutAxis), one point per x
    xs = [m["completed"] - sum((t.get("by_status") or {}).get("aborted", 0) for t in m["tasks"].values())
          for m in metrics]
    firsts = [(x, m) for i, (x, m) in enumerate(zip(xs, metrics)) if all(x > y for y in xs[:i])]
    rewarded = [(x, m) for x, m in firsts if m["tasks"]["echo"]["mean_reward"] is not None]
    assert [(e.step, e.value) for e in acc.Scalars("tasks/echo/mean_reward")] == [
        (x, pytest.approx(m["tasks"]["echo"]["mean_reward"])) for x, m in rewarded]
    assert len(rewarded) >= 1 and acc.Scalars("rollouts/completed")[-1].value == metrics[-1]["completed"]


def _learner_events(tmp_path: Path) -> list[dict]:  # type: ignore[type-arg]
    """learner.jsonl's complete lines."""
    path = tmp_path / "report" / "learner.jsonl"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def test_killed_learner_resumes_from_the_bucket_and_trains_no_group_twice(tmp_path: Path) -> None:
    run_id = "kill"
    max_steps = 4
    config = tiny_train_config(tmp_path, run_id, budget={"max_steps": max_steps})
    bucket = AdapterBucket(str(tmp_path / "bucket"), run_id)
    job = train_process(config)
    deadline = time.monotonic() + 300
    while not bucket.versions() and time.monotonic() < deadline and job.poll() is None:
        time.sleep(0.05)
    assert bucket.versions(), job.communicate()[0] if job.poll() is not None else "no publish in time"
    learner_pid = int((tmp_path / "report" / "learner.pid").read_text())
    os.kill(learner_pid, signal.SIGKILL)
    out, _ = job.communicate(timeout=300)
    assert job.returncode == 3 and "run the same command again" in out, (job.returncode, out)
    published_at_kill = bucket.latest()
    assert published_at_kill is not None and published_at_kill.meta["step"] < max_steps
    # The kill lands between the newest publish and its step's row in learner.jsonl, or after the
    # row: make it the first, the window that lost a row from the report before (steps [2, 3, 4]).
    path = tmp_path / "report" / "learner.jsonl"
    kept = [line for line in path.read_text().splitlines(keepends=True)
            if not (line.endswith("\n") and json.loads(line).get("event") == "step"
                    and json.loads(line)["step"] == published_at_kill.meta["step"])]
    path.write_text("".join(kept))

    code, out = run_train(config)
    assert code == 0, out
    events = _learner_events(tmp_path)
    starts = [e for e in events if e["event"] == "start"]
    assert len(starts) == 2 and starts[1]["resumed"] is True
    assert starts[1]["step"] == published_at_kill.meta["step"]  # resumed at the right step
    assert [e["step"] for e in events if e["event"] == "step"][-1] == max_steps
    # the report of the second start covers both (before: only the rerun's steps), each step once
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [(s["resumed"], s["step"]) for s in report["starts"]] == [(False, 0), (True, starts[1]["step"])]
    steps = [s["step"] for s in report["steps"]]
    assert steps == list(range(1, max_steps + 1)), steps
    recovered = [e for e in events if e["event"] == "step" and e.get("recovered")]
    assert [(e["step"], e["published_version"]) for e in recovered] == [
        (published_at_kill.meta["step"], published_at_kill.version)]  # written back from meta.json
    assert {s["start"] for s in report["steps"] if s["step"] <= starts[1]["step"]} == {0}
    assert {s["start"] for s in report["steps"] if s["step"] > starts[1]["step"]} == {1}
    consumed = [g for v in bucket.versions() for g in bucket.get(v).meta["consumed_group_ids"]]
    assert consumed and len(consumed) == len(set(consumed))  # no group in two published versions

    async def store_consumed() -> set[str]:
        from sqlalchemy import select

        from gymfleet.orchestrator.store.schema import GroupRow

        async with await TrajectoryStore.open(str(tmp_path / "store.db")) as store:
            async with store.engine.connect() as conn:
                rows = (await conn.execute(select(GroupRow.__table__.c.group_id)
                                           .where(GroupRow.__table__.c.consumed_at.is_not(None)))).all()
        return {r[0] for r in rows}

    assert set(consumed) <= asyncio.run(store_consumed())
