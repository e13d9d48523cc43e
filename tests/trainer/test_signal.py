"""Zero-variance groups (no GRPO gradient): counted, acknowledged untrained, and the step refilled
from the real SQLite store until it holds groups with reward variance, within its bound."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.trainer.signal import DynamicSamplingConfig, StepClaimer
from gymfleet.trainer.source import StoreGroupSource
from tests.orchestrator.store.conftest import fill_group

RUN = "run-signal"
FRESH = 4  # fill_group's samples are generated at versions 0..4: a learner at v4 keeps them all


async def _store(tmp_path: Path, rewards: dict[str, list[float]]) -> TrajectoryStore:
    store = await TrajectoryStore.open(f"sqlite:///{tmp_path / 'store.db'}")
    await store.start_run(RUN, {})
    for instance, group_rewards in rewards.items():  # completed in this order: claimed oldest first
        await fill_group(store, RUN, instance, size=len(group_rewards), rewards=group_rewards)
    return store


def _claimer(store: TrajectoryStore, groups_per_step: int = 2, **sampling: object) -> StepClaimer:
    source = StoreGroupSource(store, RUN, min_groups=1)
    return StepClaimer(source, "learner", groups_per_step, lease_s=600, config=DynamicSamplingConfig(**sampling))


def _gid(instance: str) -> str:
    return f"{RUN}/echo/p0/{instance}"


async def test_zero_variance_groups_are_counted_acked_and_refilled(tmp_path: Path) -> None:
    store = await _store(tmp_path, {"all1": [1.0, 1.0], "all0": [0.0, 0.0], "c": [1.0, 0.0], "d": [0.0, 1.0],
                                    "e": [1.0, 0.0]})
    asked: list[int] = []
    claimer = _claimer(store)
    claimer.on_refill = asked.append
    async with store:
        got = await claimer.claim_step(FRESH, FRESH)
        assert got is not None
        assert got.trained_ids == [_gid("c"), _gid("d")]
        assert got.zero_variance_ids == got.skipped_ids == [_gid("all1"), _gid("all0")]
        assert got.n_extra_claims == 1 and got.n_groups_short == 0 and asked == [2]
        assert [[t.reward for t in g] for g in got.trained] == [[1.0, 0.0], [0.0, 1.0]]
        assert len(got.filter.staleness) == 4  # the staleness histogram counts trained samples only
        # the zero-variance groups are consumed: nobody claims them again; c and d are still held
        other = await store.claim_groups(10, "someone-else", lease_s=60, run_id=RUN)
        assert other.group_ids == [_gid("e")]


async def test_the_refill_gives_up_after_its_extra_claims_and_says_so(tmp_path: Path, caplog) -> None:
    store = await _store(tmp_path, {f"z{i}": [0.0, 0.0] for i in range(6)} | {"late": [1.0, 0.0]})
    async with store:
        with caplog.at_level(logging.WARNING, logger="gymfleet.trainer.signal"):
            got = await _claimer(store, max_extra_claims=1).claim_step(FRESH, FRESH)
        assert got is not None and got.trained == [] and got.n_extra_claims == 1
        assert len(got.zero_variance_ids) == 4 and got.n_groups_short == 2
        assert "step trains 0 of 2 groups" in caplog.text and "max_extra_claims" in caplog.text


async def test_the_refill_gives_up_after_its_wait_bound(tmp_path: Path) -> None:
    store = await _store(tmp_path, {"z": [1.0, 1.0], "v": [1.0, 0.0]})
    async with store:
        t0 = time.monotonic()
        got = await _claimer(store, max_wait_s=0.5).claim_step(FRESH, FRESH)
        waited_s = time.monotonic() - t0
        assert got is not None and got.trained_ids == [_gid("v")] and got.n_groups_short == 1
        assert 0.5 <= waited_s < 3.0


async def test_with_dynamic_sampling_off_zero_variance_groups_are_trained_and_counted(tmp_path: Path) -> None:
    store = await _store(tmp_path, {"z": [1.0, 1.0], "v": [1.0, 0.0], "w": [0.0, 1.0]})
    async with store:
        got = await _claimer(store, enabled=False).claim_step(FRESH, FRESH)
        assert got is not None and got.trained_ids == [_gid("z"), _gid("v")]
        assert got.zero_variance_ids == [_gid("z")] and got.skipped_ids == [] and got.n_extra_claims == 0


async def test_groups_repair_drops_are_refilled_too_and_reported_as_dropped(tmp_path: Path) -> None:
    store = await _store(tmp_path, {"v": [1.0, 0.0], "w": [0.0, 1.0]})
    async with store:
        # a learner 10 versions past every sample: repair drops both groups as stale
        got = await _claimer(store, groups_per_step=1, max_wait_s=0.3).claim_step(FRESH + 10, FRESH)
        assert got is not None and got.dropped_ids == [_gid("v"), _gid("w")] and got.trained == []
        assert got.n_extra_claims == 1 and got.n_groups_short == 1 and got.filter.groups_dropped == 2


async def test_a_stop_request_ends_the_refill_at_once(tmp_path: Path) -> None:
    store = await _store(tmp_path, {"z": [1.0, 1.0], "v": [1.0, 0.0]})
    async with store:
        claimer = _claimer(store)
        claimer.should_stop = lambda: True
        t0 = time.monotonic()
        got = await claimer.claim_step(FRESH, FRESH)
        assert time.monotonic() - t0 < 5.0  # not the 60 s max_wait_s
        assert got is not None and got.trained_ids == [_gid("v")] and got.n_extra_claims == 0
        assert got.n_groups_short == 1
