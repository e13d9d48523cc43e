"""Applies a batch of work-queue writes with one statement per kind (executemany), not per rollout.

The writer uses this when a batch holds only these operations; any failure rolls the whole batch
back and the writer replays it one savepoint per operation (``workqueue.py``), so the outcome is
the same, only faster. Kinds are applied in the order create -> start -> finish: the only
dependencies inside a batch (a group before its samples start, an attempt's start before its
finish) point that way, and a retry's start overtaking the previous attempt's non-final finish
leaves the sample in the same state (running the new attempt) as the queued order would.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Boolean, bindparam, case, insert, literal, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gymfleet.core.records import Trajectory
from gymfleet.orchestrator.store.codec import to_values
from gymfleet.orchestrator.store.schema import GroupRow, SampleRow, SampleState, TrajectoryRow, UTCDateTime, utcnow
from gymfleet.orchestrator.store.workqueue import GroupSpec, create_groups, lock_samples, recorded, settled_values

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
    keep_lease: bool = False


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
    created = set(await create_groups(conn, [g for _, g in creates]))
    for i, group in creates:  # a group queued twice: the first one created it
        results[i] = group.group_id in created
        created.discard(group.group_id)


async def _finishes(conn: AsyncConnection, items: list[BulkItem], results: list[Any], now: Any) -> None:
    finishes = [(i, it) for i, it in enumerate(items) if isinstance(it, Finish)]
    if not finishes:
        return
    current = await lock_samples(conn, {f.sample_id for _, f in finishes if f.sample_id is not None})
    # An attempt a peer requeued after its lease ran out is already recorded (aborted): skip it.
    lost = await recorded(conn, [f.traj.rollout_id for _, f in finishes
                                 if f.sample_id is not None
                                 and current.get(f.sample_id) != (f.traj.rollout_id, SampleState.running)])
    kept = [(i, f) for i, f in finishes if f.traj.rollout_id not in lost]
    for i, f in finishes:
        if f.traj.rollout_id in lost:
            results[i] = False
    if kept:
        await conn.execute(insert(TRAJ), [to_values(t, sample_id=f.sample_id, task=f.task)
                                          for _, f in kept for t in (f.traj, *f.traj.branches)])
    sample_updates, group_counts = [], Counter[str]()
    for i, f in kept:
        if f.sample_id is None:
            results[i] = True
            continue
        if current.get(f.sample_id) != (f.traj.rollout_id, SampleState.running):
            results[i] = False  # stored, but the sample moved on (see workqueue.finish)
            continue
        values = settled_values(f.final, f.keep_lease)
        current[f.sample_id] = (f.traj.rollout_id, values["state"])
        sample_updates.append({"b_sid": f.sample_id, "b_state": values["state"],
                               "b_owner_kept": "lease_owner" not in values})
        if f.final:
            group_counts[f.traj.group_id] += 1
        results[i] = True
    if sample_updates:
        await conn.execute(
            update(SAMPLES).where(SAMPLES.c.sample_id == bindparam("b_sid"))
            .values(state=bindparam("b_state", type_=SAMPLES.c.state.type), updated_at=now,
                    lease_owner=case((bindparam("b_owner_kept", type_=Boolean), SAMPLES.c.lease_owner), else_=None),
                    lease_expires_at=case((bindparam("b_owner_kept", type_=Boolean), SAMPLES.c.lease_expires_at), else_=None)),
            sample_updates,
        )
    if group_counts:  # in group_id order, so that two orchestrators' writers never deadlock
        await conn.execute(
            update(GROUPS).where(GROUPS.c.group_id == bindparam("b_gid")).values(
                n_done=GROUPS.c.n_done + bindparam("b_n"),
                completed_at=case((GROUPS.c.n_done + bindparam("b_n") >= GROUPS.c.size,
                                   literal(now, UTCDateTime())), else_=None)),
            [{"b_gid": g, "b_n": group_counts[g]} for g in sorted(group_counts)],
        )
