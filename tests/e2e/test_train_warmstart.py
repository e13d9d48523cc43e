"""`gymfleet train` with `warmstart.enabled` end to end (embedded model, echo env): the warm start
publishes v1 before the learner starts, every rollout samples from it (and, having learnt the
action format, earns reward), GRPO resumes from it and publishes v2; a rerun skips the stage."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.trainer.bucket import AdapterBucket
from tests.e2e.train_helpers import run_train, tiny_train_config

pytestmark = [pytest.mark.model, pytest.mark.slow]

RUN_ID = "warm"


async def _rollouts(store_url: str, run_id: str) -> list:
    async with await TrajectoryStore.open(store_url) as store:
        return [s.trajectory for s in await store.trajectories(run_id, limit=None)]


def test_train_warm_starts_then_grpo_continues_from_v1(tmp_path: Path) -> None:
    warmstart = {"enabled": True, "epochs": 3, "batch_size": 2, "learning_rate": 3e-3}
    config = tiny_train_config(tmp_path, RUN_ID, mode="sync", budget={"max_steps": 1}, warmstart=warmstart)
    code, out = run_train(config)
    assert code == 0, out
    assert "warm start: 8 demonstrations" in out and "published v1" in out, out
    bucket = AdapterBucket(str(tmp_path / "bucket"), RUN_ID)
    assert bucket.versions() == [1, 2]
    assert bucket.get(1).meta["step"] == 0 and bucket.get(2).meta["step"] == 1  # GRPO's first step, from v1
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["adapter_loads"][0]["version"] == 1
    rollouts = asyncio.run(_rollouts(str(tmp_path / "store.db"), RUN_ID))
    generated = [t for t in rollouts if t.n_generated_tokens]
    assert generated and all(t.oldest_version >= 1 for t in generated)  # no rollout from the base model
    assert not any(t.metrics.get("demonstration") for t in rollouts)
    assert sum(t.reward for t in generated) / len(generated) >= 0.5, [t.reward for t in generated]

    # A rerun resumes: the stage is skipped, nothing is re-recorded.
    code, out = run_train(config, "budget.max_steps=2")
    assert code == 0, out
    assert "warm start skipped" in out and bucket.versions() == [1, 2, 3]
