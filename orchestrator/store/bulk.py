"""Applies a batch of work-queue writes with one statement per kind (executemany), not per rollout.

The writer uses this when a batch holds only these operations; any failure rolls the whole batch
back and the writer replays it one savepoint per operation (``workqueue.py``), so the outcome is
the same, only faster. Kinds are applied in the order create -> start -> finish: the only
dependencies inside a batch (a group before its samples start, an attempt's start before its
finish) point that way, and a retry's start overtaking the previous attempt's non-final finish
leaves the sample in the same state (running the new attempt) as the queued order would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, case, insert, literal, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gymfleet.core.records import Trajectory
from gymfleet.orchestrator.store.codec import to_values
from gymfleet.orchestrator.store.schema import GroupRow, SampleRow, SampleState, TrajectoryRow, UTCDateTime, utcnow
from gymfleet.orchestrator.store.workqueue import GroupSpec

GROUPS, SAMPLES, TRAJ = GroupRow.__table__, SampleRow.__table__, TrajectoryRow.__table__


@dataclass(frozen=True)
class CreateGroup:
    group: GroupSpec


@dataclass(frozen=True)
class StartSample:
    sample_id: str
    rollout_id: str


@dataclass(frozen=True)
class Finish:
    traj: Trajectory
    sample_id: str | None
    task: str
    final: bool


BulkItem = CreateGroup | StartSample | Finish


async def apply_batch(conn: AsyncConnection, items: list[BulkItem]) -> list[Any]:
    """Applies ``items``; returns each one's result as its one-by-one function would."""
    results: list[Any] = [None] * len(items)
    now = utcnow()
    await _creates(conn, items, results, now)
    starts = [it for it in items if isinstance(it, StartSample)]
    if starts:
        await conn.execute(
            update(SAMPLES).where(SAMPLES.c.sample_id == bindparam("b_sid")).values(
                state=SampleState.running, rollout_id=bindparam("b_rid"),
                n_attempts=SAMPLES.c.n_attempts + 1, updated_at=now),
            [{"b_sid": s.sample_id, "b_rid": s.rollout_id} for s in starts],
        )
    await _finishes(conn, items, results, now)
    return results


async def _creates(conn: AsyncConnection, items: list[BulkItem], results: list[Any], now: Any) -> None:
    creates = [(i, it.group) for i, it in enumerate(items) if isinstance(it, CreateGroup)]
    if not creates:
        return
    ids = [g.group_id for _, g in creates]
    existing = set((await conn.scalars(select(GROUPS.c.group_id).where(GROUPS.c.group_id.in_(ids)))).all())
    fresh: list[GroupSpec] = []
    for i, group in creates:
        results[i] = group.group_id not in existing
        if results[i]:
            existing.add(group.group_id)
            fresh.append(group)
    if not fresh:
        return
    await conn.execute(insert(GROUPS), [
        dict(group_id=g.group_id, run_id=g.run_id, task=g.task, env_id=g.env_id, instance_id=g.instance_id,
             size=g.size, n_done=0, created_at=now) for g in fresh])
    await conn.execute(insert(SAMPLES), [
        dict(sample_id=sid, run_id=g.run_id, group_id=g.group_id, sample_idx=i, state=SampleState.pending,
             n_attempts=0, rollout_id=None, updated_at=now)
        for g in fresh for i, sid in enumerate(g.sample_ids())])


async def _finishes(conn: AsyncConnection, items: list[BulkItem], results: list[Any], now: Any) -> None:
    finishes = [(i, it) for i, it in enumerate(items) if isinstance(it, Finish)]
    if not finishes:
        return
    await conn.execute(insert(TRAJ), [to_values(f.traj, sample_id=f.sample_id, task=f.task) for _, f in finishes])
    sample_ids = {f.sample_id for _, f in finishes if f.sample_id is not None}
    current = {
        r.sample_id: (r.rollout_id, r.state)
        for r in await conn.execute(select(SAMPLES.c.sample_id, SAMPLES.c.rollout_id, SAMPLES.c.state)
                                    .where(SAMPLES.c.sample_id.in_(sample_ids)))
    } if sample_ids else {}
    sample_updates, group_updates = [], []
    for i, f in finishes:
        if f.sample_id is None:
            results[i] = True
            continue
        rollout_id, state = current.get(f.sample_id, (None, None))
        if state != SampleState.running or rollout_id != f.traj.rollout_id:
            results[i] = False  # stored, but the sample moved on (see workqueue.finish)
            continue
        new_state = SampleState.done if f.final else SampleState.pending
        current[f.sample_id] = (rollout_id, new_state)
        sample_updates.append({"b_sid": f.sample_id, "b_state": new_state})
        if f.final:
            group_updates.append({"b_gid": f.traj.group_id})
        results[i] = True
    if sample_updates:
        await conn.execute(
            update(SAMPLES).where(SAMPLES.c.sample_id == bindparam("b_sid"))
            .values(state=bindparam("b_state", type_=SAMPLES.c.state.type), updated_at=now),
            sample_updates,
        )
    if group_updates:
        await conn.execute(
            update(GROUPS).where(GROUPS.c.group_id == bindparam("b_gid")).values(
                n_done=GROUPS.c.n_done + 1,
                completed_at=case((GROUPS.c.n_done + 1 >= GROUPS.c.size, literal(now, UTCDateTime())), else_=None)),
            group_updates,
        )
