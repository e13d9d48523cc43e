"""Harness tasks mix with native ones in one scheduler run: mini-swe-agent rollouts go through
the HTTP gateway (HarnessRollouts), the other task through the ordinary Rollout, all stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gymfleet.envs.harness.harnesses import noop_replies
from gymfleet.orchestrator.envfactory import env_factory, resolve_instances
from gymfleet.orchestrator.gateway import Gateway
from gymfleet.orchestrator.harness_rollout import open_harness_rollouts
from gymfleet.orchestrator.scheduler import Scheduler
from gymfleet.orchestrator.store import TrajectoryStore
from tests.orchestrator.conftest import run_config, task
from tests.orchestrator.http_fakes import ScriptedTextEngine

pytestmark = [pytest.mark.bwrap, pytest.mark.model, pytest.mark.timeout(300)]


async def test_harness_and_native_tasks_in_one_run(tmp_path: Path, sqlite_store: TrajectoryStore,
                                                   bwrap_available: bool, smollm_tokenizer: Any) -> None:
    harness_task = {"name": "harness", "env_id": "gymfleet/Harness-v0", "group_size": 2,
                    "instances": ["append-line-apple"], "rollout_timeout_s": 120,
                    "env_kwargs": {"harness": "mini-swe-agent", "task_kwargs": {"sandbox": "local"},
                                   "grading_reserve_s": 20}}
    cfg = run_config(tmp_path, [harness_task, task("native", env_kwargs={"n_instances": 2}, group_size=2)])
    # every call answers with the no-op (submit at once); the native echo env gets the same text (reward 0)
    gateway = Gateway(smollm_tokenizer, ScriptedTextEngine(smollm_tokenizer, noop_replies("mini-swe-agent")))
    factories = {t.name: env_factory(t) for t in cfg.tasks}
    instances = {t.name: await resolve_instances(t, factories[t.name]) for t in cfg.tasks}
    async with open_harness_rollouts(gateway) as make_rollout:
        outcome = await Scheduler(cfg, sqlite_store, gateway, factories, instances, make_rollout=make_rollout).run()
    assert outcome.completed == 2 + 4
    stored = {s.trajectory.rollout_id: s.trajectory for s in await sqlite_store.trajectories("r1", limit=None)}
    harness = [t for t in stored.values() if t.env_id == "gymfleet/Harness-v0"]
    native = [t for t in stored.values() if t.env_id != "gymfleet/Harness-v0"]
    assert len(harness) == 2 and len(native) == 4
    for traj in harness:
        assert (traj.status.value, traj.reward, traj.metrics["harness_exit"], traj.metrics["calls"]) == ("ok", 0.0, "Submitted", 1)
        assert traj.n_generated_tokens > 0 and set(traj.versions[traj.loss_mask == 1].tolist()) == {3}
    assert all("calls" not in t.metrics for t in native)
