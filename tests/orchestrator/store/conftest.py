"""Store fixtures: every store test runs on SQLite and on PostgreSQL (its own schema per test)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from gymfleet.core.records import Message, RolloutStatus, Trajectory
from gymfleet.orchestrator.store import GroupSpec, TrajectoryStore
from gymfleet.orchestrator.store.engine import normalise_url


@dataclass(frozen=True)
class StoreTarget:
    """Where a test's store lives: a URL, and a PostgreSQL schema of its own."""

    url: str
    schema: str | None

    async def open(self) -> TrajectoryStore:
        return await TrajectoryStore.open(self.url, schema=self.schema)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreTarget]:
    if request.param == "sqlite":
        yield StoreTarget(f"sqlite:///{tmp_path / 'store.db'}", None)
        return
    url = request.getfixturevalue("pg_url")
    schema = f"test_{uuid.uuid4().hex[:12]}"
    yield StoreTarget(url, schema)
    engine = create_async_engine(normalise_url(url))
    async with engine.begin() as conn:
        await conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    await engine.dispose()


@pytest.fixture
async def store(target: StoreTarget) -> AsyncIterator[TrajectoryStore]:
    async with await target.open() as s:
        yield s


def make_trajectory(run_id: str, group_id: str, idx: int, *, n_tokens: int = 50, reward: float = 1.0,
                    seed: int = 0) -> Trajectory:
    """A trajectory with random arrays (edge values included) and two messages."""
    rng = np.random.default_rng(seed + idx)
    token_ids = rng.integers(-2**31, 2**31 - 1, size=n_tokens, dtype=np.int64).astype(np.int32)
    loss_mask = (rng.random(n_tokens) > 0.5).astype(np.uint8)
    logprobs = np.where(loss_mask == 1, -rng.random(n_tokens) * 10, 0).astype(np.float32)
    versions = np.where(loss_mask == 1, rng.integers(0, 5, size=n_tokens), -1).astype(np.int32)
    return Trajectory(
        rollout_id=f"{group_id}/{idx}/a1", run_id=run_id, group_id=group_id, env_id="gymfleet-test/Echo-v0",
        instance_id=group_id.rsplit("/", 1)[-1], token_ids=token_ids, loss_mask=loss_mask,
        logprobs=logprobs, versions=versions,
        messages=[Message("user", "Say 'alpha'. ünïcode ✓"), Message("assistant", "alpha")],
        reward=reward, metrics={"passed": 3, "detail": {"x": [1, 2]}}, status=RolloutStatus.ok,
        reason="", timings={"generation_s": 0.5, "env_s": 0.25},
    )


async def fill_group(store: TrajectoryStore, run_id: str, instance: str, size: int = 4,
                     rewards: list[float] | None = None) -> GroupSpec:
    """Creates a group and finishes every sample of it through the work queue."""
    group = GroupSpec(f"{run_id}/echo/p0/{instance}", run_id, "echo", "gymfleet-test/Echo-v0", instance, size)
    store.create_group(group)
    for i, sample_id in enumerate(group.sample_ids()):
        traj = make_trajectory(run_id, group.group_id, i, reward=(rewards or [1.0] * size)[i])
        store.start_sample(sample_id, traj.rollout_id)
        store.add(traj, sample_id=sample_id, task="echo")
    await store.flush()
    return group
