"""Dynamic sampling in a whole training job: in lock-step (sync) mode the job lets one more group
start for each zero-variance group the learner set aside, so every step still trains a full
``groups_per_step`` of groups with reward variance. Real store, learner process and bucket; the
gateway is scripted and the env pays 1 with probability 0.5 whatever the reply (a group of two
has no variance half of the time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.run.config import load_train_config
from gymfleet.run.job import train
from tests.e2e.train_helpers import tiny_train_config

pytestmark = pytest.mark.model


async def test_sync_mode_starts_the_groups_the_refill_asks_for(tmp_path: Path) -> None:
    path = tiny_train_config(
        tmp_path, "refill", mode="sync", budget={"max_steps": 3},
        policy={"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"},
        tasks=[{"name": "coin", "env_id": "tests.orchestrator.fakes:gymfleet-test/Coin-v0",
                "env_kwargs": {"n_instances": 64}, "group_size": 2, "max_turns": 1,
                "sampling": {"max_new_tokens": 6}}])
    cfg = load_train_config(path, ["learner.dynamic_sampling.enabled=true", "learner.dynamic_sampling.max_wait_s=20"])
    outcome = await train(cfg, live=False)
    report = outcome.report.to_dict()
    assert outcome.learner_exitcode == 0 and report["last_step"] == 3
    assert [s["n_groups"] for s in report["steps"]] == [2, 2, 2] and report["steps_short"] == 0
    # Coin-v0 draws are seeded: some group of these runs has two equal rewards, so the refill ran
    assert report["zero_variance_groups"] > 0 and report["refill_extra_claims"] > 0
    assert report["zero_variance_groups"] == sum(s["n_zero_variance_groups"] for s in report["steps"])
