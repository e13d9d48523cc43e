"""A run over two real vLLM servers keeps every rollout when both servers are frozen (SIGSTOP)
for longer than a health timeout, then thawed (slow is not dead: no replica leaves the ring, no
rollout fails, no task is quarantined), and when one server is killed mid-run (the router retries
the failed turns on the other replica, and each trajectory is complete)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gymfleet.run.collection import collect
from gymfleet.orchestrator.store import TrajectoryStore
from tests.orchestrator.conftest import run_config, task

pytestmark = [pytest.mark.vllm, pytest.mark.model, pytest.mark.timeout(900)]
N_INSTANCES, GROUP = 8, 2
HEALTH_TIMEOUT_S = 5.0
FROZEN_S = 2.5 * HEALTH_TIMEOUT_S


async def _n_stored(store_url: str, run_id: str) -> int:
    try:
        async with await TrajectoryStore.open(store_url) as store:
            return len(await store.trajectories(run_id, limit=None))
    except Exception:  # the run's row is not written yet
        return 0


async def test_freezing_both_replicas_past_a_health_timeout_loses_no_rollout(
    vllm_pool: Any, vllm_pair: list[Any], tmp_path: Path
) -> None:
    engines = [{"kind": "vllm", "base_url": s.base_url, "model": s.served_model_name, "name": name}
               for s, name in zip(vllm_pair, ("a", "b"))]
    echo = task("echo", env_kwargs={"n_instances": N_INSTANCES, "step_delay_s": 0.3, "turns": 3}, group_size=GROUP,
                max_turns=3, sampling={"temperature": 1.0, "max_new_tokens": 6})
    router = {"health_interval_s": 0.5, "health_timeout_s": HEALTH_TIMEOUT_S, "request_timeout_s": 120}
    config = run_config(tmp_path, [echo], max_in_flight=8, policy={"engines": engines, "router": router})
    stored_at_freeze: list[int] = []

    async def freeze_mid_run() -> None:
        while (n := await _n_stored(config.store, config.run_id)) < 2:
            await asyncio.sleep(0.2)
        stored_at_freeze.append(n)
        for name in ("f32", "f32-rank8"):
            vllm_pool.freeze(name)
        try:
            await asyncio.sleep(FROZEN_S)  # the scenario itself: a machine starved this long
        finally:
            for name in ("f32", "f32-rank8"):
                vllm_pool.freeze(name, frozen=False)

    freezer = asyncio.create_task(freeze_mid_run())
    outcome = await collect(config, live=False)
    await freezer
    assert stored_at_freeze[0] < N_INSTANCES * GROUP and all(s.alive() for s in vllm_pair)
    assert outcome.status.value == "completed" and not outcome.quarantined, outcome
    assert outcome.by_status == {"ok": N_INSTANCES * GROUP}, outcome.by_status


async def test_killing_a_replica_mid_run_loses_no_rollout(vllm_pool: Any, vllm_pair: list[Any], tmp_path: Path) -> None:
    engines = [{"kind": "vllm", "base_url": s.base_url, "model": s.served_model_name, "name": name}
               for s, name in zip(vllm_pair, ("survivor", "victim"))]
    echo = task("echo", env_kwargs={"n_instances": N_INSTANCES, "step_delay_s": 0.3, "turns": 3}, group_size=GROUP,
                max_turns=3, sampling={"temperature": 1.0, "max_new_tokens": 6})
    config = run_config(tmp_path, [echo], max_in_flight=8,
                        policy={"engines": engines, "router": {"health_interval_s": 0.5, "request_timeout_s": 60}})
    stored_at_kill: list[int] = []

    async def kill_mid_run() -> None:
        while (n := await _n_stored(config.store, config.run_id)) < 2:
            await asyncio.sleep(0.2)
        stored_at_kill.append(n)
        vllm_pool.kill("f32-rank8")

    killer = asyncio.create_task(kill_mid_run())
    outcome = await collect(config, live=False)
    await killer
    assert stored_at_kill[0] < N_INSTANCES * GROUP and not vllm_pair[1].alive() and vllm_pair[0].alive()
    assert outcome.status.value == "completed", outcome
    assert outcome.by_status == {"ok": N_INSTANCES * GROUP}, outcome.by_status  # none lost, none failed
    assert await _n_stored(config.store, config.run_id) == N_INSTANCES * GROUP
