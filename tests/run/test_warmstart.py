"""The warm start on the tiny training config (echo env, real tokenizer and model): demonstrations
stored apart from the run's groups, `gymfleet sft` lowering their loss and publishing v1, the learner
resuming from it, `gymfleet train`'s stage skipped on resume, one-line errors."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.run.collection import collect
from gymfleet.run.config import load_train_config
from gymfleet.run.demonstrations import demo_run_id, load_demonstrations, record_demonstrations
from gymfleet.run.warmstart import warm_start_if_new
from gymfleet.trainer import AdapterBucket, Learner, demonstration_loss
from tests.e2e.train_helpers import tiny_train_config
from tests.trainer.test_learner import MemoryGroupSource

RUN_ID = "ws"
WARMSTART = {"epochs": 3, "batch_size": 2, "learning_rate": 3e-3}


@pytest.mark.model
async def test_demonstrations_never_enter_the_runs_groups(tmp_path: Path, smollm_tokenizer: Any) -> None:
    cfg = load_train_config(tiny_train_config(tmp_path, RUN_ID), ["tasks.0.passes=1"])
    recording = await record_demonstrations(cfg.run, smollm_tokenizer, episodes_per_instance=2,
                                            max_instances_per_task=3)
    assert (recording.run_id, recording.by_status, recording.n_solved) == ("ws.demos", {"ok": 6}, 6)
    # The run's own collection (a scripted policy) into the same store: 8 groups of 2.
    echo = cfg.run.model_copy(update={"policy": cfg.run.policy.model_copy(
        update={"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"})})
    await collect(echo, live=False)
    async with await TrajectoryStore.open(cfg.run.store) as store:
        demos = await load_demonstrations(store, RUN_ID)
        assert len(demos) == 6 and all(d.metrics["demonstration"] and d.run_id == "ws.demos" for d in demos)
        assert {d.instance_id for d in demos} == {"w000", "w001", "w002"}
        claim = await store.claim_groups(100, "learner", run_id=RUN_ID)  # what the run's learner claims
        claimed = [t for g in claim.groups for t in g.trajectories]
        assert len(claim.groups) == 8 and len(claimed) == 16
        assert not any(t.metrics.get("demonstration") or t.run_id == demo_run_id(RUN_ID) for t in claimed)
        demo_groups = await store.claim_groups(100, "other", run_id=demo_run_id(RUN_ID))  # their own run's groups of 1
        assert len(demo_groups.groups) == 6 and all(len(g.trajectories) == 1 for g in demo_groups.groups)


@pytest.mark.model
def test_gymfleet_sft_lowers_the_loss_publishes_v1_and_the_learner_resumes_from_it(tmp_path: Path) -> None:
    config = tiny_train_config(tmp_path, RUN_ID, warmstart=WARMSTART)
    result = CliRunner().invoke(app, ["sft", str(config)])
    assert result.exit_code == 0, result.output
    losses = [float(x) for x in re.findall(r"epoch \d+(?: \(before\))?: loss ([0-9.]+)", result.output)]
    assert len(losses) == 4 and all(b < a for a, b in zip(losses, losses[1:])), result.output
    assert losses[-1] < losses[0] / 2, losses
    # printed as each epoch ends, not only at the end (a warm start takes minutes on a CPU)
    live = [float(x) for x in re.findall(r"warm start: loss ([0-9.]+) nats per target token (?:before training|"
                                         r"after epoch \d/3)", result.output)]
    assert live == losses, result.output
    assert "demonstrations: 8 (run ws.demos)" in result.output and "published v1" in result.output

    cfg = load_train_config(config)
    bucket = AdapterBucket(cfg.bucket, RUN_ID)
    assert bucket.versions() == [1]
    meta = bucket.get(1).meta
    assert meta["step"] == 0 and meta["warm_start"]["epoch_losses"][-1] == pytest.approx(losses[-1], abs=1e-4)

    async def resumed() -> tuple[Any, list[Any]]:
        async with await TrajectoryStore.open(cfg.run.store) as store:
            demos = await load_demonstrations(store, RUN_ID)
        learner = Learner(cfg.learner, cfg.rollout_policy(), MemoryGroupSource({}), bucket)
        assert await learner.resume()
        return learner, demos

    learner, demos = asyncio.run(resumed())
    assert (learner.version, learner.step) == (1, 0)  # GRPO publishes v2 next; no budget step spent
    assert learner.optimizer.param_groups[0]["lr"] == cfg.learner.learning_rate
    assert demonstration_loss(learner, demos) == pytest.approx(losses[-1], abs=1e-3)

    # Again: the run has a version, so the warm start refuses (one line, exit 2), and `train`'s stage skips.
    again = CliRunner().invoke(app, ["sft", str(config)])
    assert again.exit_code == 2 and "already holds versions [1]" in again.output, again.output
    enabled = load_train_config(config, ["warmstart.enabled=true"])
    console = Console(record=True, width=200)
    assert asyncio.run(warm_start_if_new(enabled, console)) is None
    assert "warm start skipped" in console.export_text()


def test_a_typo_in_the_warmstart_section_exits_2(tmp_path: Path) -> None:
    config = tiny_train_config(tmp_path, RUN_ID, warmstart={"epoch": 2})
    result = CliRunner().invoke(app, ["sft", str(config)])
    assert result.exit_code == 2 and "epochs" in result.output, result.output



@pytest.mark.model
def test_gold_policies_that_earn_nothing_are_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tiny_train_config(tmp_path, RUN_ID, warmstart=WARMSTART)
    result = CliRunner().invoke(app, ["sft", str(config), "--set",
                                      'tasks.0.env_id="tests.orchestrator.fakes:gymfleet-test/Buggy-v0"'])
    assert result.exit_code == 2, result.output
    assert "no solved demonstration in run ws.demos" in result.output and "gymfleet runs show ws.demos" in result.output
    assert AdapterBucket(str(tmp_path / "bucket"), RUN_ID).versions() == []


def test_a_rewarded_episode_cut_by_the_turn_limit_is_a_demonstration() -> None:
    """A one-turn terminal task: the gold command runs, the turn limit cuts the ``submit``, the end
    state is graded 1; that is a demonstration. Failed or unrewarded episodes are not."""
    import numpy as np

    from gymfleet.core.records import RolloutStatus, Trajectory
    from gymfleet.run.demonstrations import _solved

    def demo(status: RolloutStatus, reward: float) -> Trajectory:
        return Trajectory("r", "run.demos", "", "env", "inst", token_ids=np.arange(4),
                          loss_mask=np.array([0, 0, 1, 1], np.uint8), logprobs=np.zeros(4),
                          versions=np.full(4, -1), reward=reward, status=status)

    assert _solved(demo(RolloutStatus.ok, 1.0)) and _solved(demo(RolloutStatus.truncated, 1.0))
    assert not _solved(demo(RolloutStatus.truncated, 0.0))
    assert not _solved(demo(RolloutStatus.infra_error, 1.0))
