"""The run's roles as separate processes, joined by the store and the bucket (no Ray): `gymfleet
collect` fills the store, `gymfleet learn` trains on it and publishes, a second `learn` resumes
from the bucket, and a `collect` shard of the run hot-loads the newest version before it samples."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sqlalchemy import select

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.orchestrator.store.schema import TrajectoryRow
from gymfleet.trainer.bucket import AdapterBucket
from tests.e2e.train_helpers import ROOT, tiny_train_config

pytestmark = pytest.mark.model

RUN_ID = "roles"


def gymfleet(*argv: str, timeout_s: float = 400) -> tuple[int, str]:
    """Runs the `gymfleet` CLI in its own process; its exit code and output."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "gymfleet.cli", *argv], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s)
    return proc.returncode, proc.stdout


async def versions_by_group(url: str) -> dict[str, set[int]]:
    """The policy versions (oldest token) of each group's ok trajectories."""
    t = TrajectoryRow.__table__
    async with await TrajectoryStore.open(url) as store:
        async with store.engine.connect() as conn:
            rows = (await conn.execute(select(t.c.group_id, t.c.policy_version_min).where(t.c.status == "ok"))).all()
    found: dict[str, set[int]] = {}
    for group_id, version in rows:
        found.setdefault(group_id, set()).add(version)
    return found


def test_collect_then_learn_alone_then_resume_then_a_shard_follows_the_bucket(tmp_path: Path) -> None:
    config = tiny_train_config(tmp_path, RUN_ID, budget={"max_steps": 2})
    store = str(tmp_path / "store.db")
    bucket = AdapterBucket(str(tmp_path / "bucket"), RUN_ID)

    # The shard: a training config's collection, one pass over the 8 instances (16 samples).
    code, out = gymfleet("collect", str(config), "--no-progress", "--set", "tasks.0.passes=1")
    assert code == 0, out
    first = asyncio.run(versions_by_group(store))
    assert len(first) == 8 and all(v == {-1} or v == {0} for v in first.values()), first  # the base model

    # The learner alone, on the store that process wrote: 2 steps, 2 versions published.
    code, out = gymfleet("learn", str(config))
    assert code == 0, out
    assert "step 1:" in out and "step 2:" in out and "policy v2" in out, out
    assert bucket.versions() == [1, 2]

    # Started again with a bigger budget, it resumes from the bucket at step 2.
    code, out = gymfleet("learn", str(config), "--set", "budget.max_steps=3")
    assert code == 0, out
    events = [json.loads(line) for line in (tmp_path / "report" / "learner.jsonl").read_text().splitlines()]
    starts = [e for e in events if e["event"] == "start"]
    assert [(s["resumed"], s["step"]) for s in starts] == [(False, 0), (True, 2)]
    assert {s["device"] for s in starts} == {"cuda" if torch.cuda.is_available() else "cpu"}
    assert [e["step"] for e in events if e["event"] == "step"] == [1, 2, 3]
    assert bucket.versions() == [1, 2, 3]
    consumed = [g for v in bucket.versions() for g in bucket.get(v).meta["consumed_group_ids"]]
    assert len(consumed) == 6 and len(set(consumed)) == 6  # 2 groups a step, none trained twice

    # A shard started now loads v3 before its first rollout: the second pass samples with it.
    code, out = gymfleet("collect", str(config), "--no-progress", "--set", "tasks.0.passes=2")
    assert code == 0, out
    assert "policy v3 loaded" in out, out
    second = {g: v for g, v in asyncio.run(versions_by_group(store)).items() if g not in first}
    assert len(second) == 8 and all(v == {3} for v in second.values()), second
