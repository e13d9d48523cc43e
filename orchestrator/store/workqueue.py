"""The durable work queue of a run: groups, their samples, and what a restart requeues.

A sample is pending until the scheduler starts an attempt (running, with that attempt's rollout
id); the attempt's trajectory either finishes it (done; the group's ``n_done`` counts it and the
group completes at ``n_done == size``) or sends it back to pending (aborted, retried). A restart
turns every running sample into an aborted trajectory and a pending sample again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, case, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gymfleet.core.records import RolloutStatus, Trajectory
from gymfleet.orchestrator.store.codec import to_values
from gymfleet.orchestrator.store.schema import (
    GroupRow,
    RunRow,
    RunStatus,
    SampleRow,
    SampleState,
    TrajectoryRow,
    utcnow,
)

GROUPS, SAMPLES, TRAJ, RUNS = GroupRow.__table__, SampleRow.__table__, TrajectoryRow.__table__, RunRow.__table__


@dataclass(frozen=True)
class GroupSpec:
    """A group to create: the ``size`` samples of one task instance."""

    group_id: str
    run_id: str
    task: str
    env_id: str
    instance_id: str
    size: int

    def sample_ids(self) -> list[str]:
        """``{group_id}/{i}`` for i in 0..size-1."""
        return [f"{self.group_id}/{i}" for i in range(self.size)]


@dataclass(frozen=True)
class SampleRef:
    """One sample slot of a group, as the scheduler queues it."""

    sample_id: str
    group_id: str
    sample_idx: int
    run_id: str
    task: str
    env_id: str
    instance_id: str
    n_attempts: int = 0


@dataclass
class ResumeState:
    """What ``start_run`` found: everything the scheduler needs to continue a run.

    Attributes:
        restarted: the run existed already.
        pending: samples to run (requeued after a restart), in group order.
        group_ids: every group the run already holds (the scheduler never creates them again).
        n_aborted: running samples found by the restart, recorded as aborted trajectories.
        n_done: samples already done.
    """

    restarted: bool
    pending: list[SampleRef] = field(default_factory=list)
    group_ids: set[str] = field(default_factory=set)
    n_aborted: int = 0
    n_done: int = 0


async def create_group(conn: AsyncConnection, group: GroupSpec) -> bool:
    """Inserts the group and its pending samples; False (and nothing written) when it exists."""
    exists = await conn.scalar(select(GROUPS.c.group_id).where(GROUPS.c.group_id == group.group_id))
    if exists is not None:
        return False
    now = utcnow()
    await conn.execute(
        insert(GROUPS).values(
            group_id=group.group_id, run_id=group.run_id, task=group.task, env_id=group.env_id,
            instance_id=group.instance_id, size=group.size, n_done=0, created_at=now,
        )
    )
    await conn.execute(
        insert(SAMPLES),
        [
            dict(sample_id=sid, run_id=group.run_id, group_id=group.group_id, sample_idx=i,
                 state=SampleState.pending, n_attempts=0, rollout_id=None, updated_at=now)
            for i, sid in enumerate(group.sample_ids())
        ],
    )
    return True


async def start_sample(conn: AsyncConnection, sample_id: str, rollout_id: str) -> None:
    """Marks the sample running under attempt ``rollout_id``."""
    await conn.execute(
        update(SAMPLES)
        .where(SAMPLES.c.sample_id == sample_id)
        .values(state=SampleState.running, rollout_id=rollout_id,
                n_attempts=SAMPLES.c.n_attempts + 1, updated_at=utcnow())
    )


async def finish(
    conn: AsyncConnection, traj: Trajectory, *, sample_id: str | None, task: str, final: bool
) -> bool:
    """Inserts the trajectory and settles its sample; all or nothing (the caller's savepoint).

    Args:
        traj: the finished attempt.
        sample_id: its sample, or None for a trajectory outside any work queue.
        task: the task name, stored for queries.
        final: the attempt finishes the sample (False: back to pending, e.g. aborted).

    Returns:
        True when the attempt settled its sample (False: stored, but the sample had moved on,
        e.g. a restart already recorded this attempt as aborted).
    """
    await conn.execute(insert(TRAJ).values(**to_values(traj, sample_id=sample_id, task=task)))
    if sample_id is None:
        return True
    owned = and_(
        SAMPLES.c.sample_id == sample_id,
        SAMPLES.c.rollout_id == traj.rollout_id,
        SAMPLES.c.state == SampleState.running,
    )
    state = SampleState.done if final else SampleState.pending
    result = await conn.execute(update(SAMPLES).where(owned).values(state=state, updated_at=utcnow()))
    if result.rowcount != 1:
        return False
    if final:
        now = utcnow()
        await conn.execute(
            update(GROUPS)
            .where(GROUPS.c.group_id == traj.group_id)
            .values(
                n_done=GROUPS.c.n_done + 1,
                completed_at=case((GROUPS.c.n_done + 1 >= GROUPS.c.size, now), else_=None),
            )
        )
    return True


async def start_run(conn: AsyncConnection, run_id: str, config: dict[str, Any]) -> ResumeState:
    """Creates the run, or resumes it: running samples become aborted trajectories and pending
    again, quarantined ones pending again; returns the queue to continue from."""
    now = utcnow()
    row = (await conn.execute(select(RUNS.c.n_starts).where(RUNS.c.run_id == run_id))).first()
    if row is None:
        await conn.execute(
            insert(RUNS).values(run_id=run_id, config=config, status=RunStatus.running,
                                created_at=now, updated_at=now, n_starts=1)
        )
        return ResumeState(restarted=False)
    await conn.execute(
        update(RUNS).where(RUNS.c.run_id == run_id)
        .values(config=config, status=RunStatus.running, updated_at=now, n_starts=RUNS.c.n_starts + 1)
    )
    state = ResumeState(restarted=True)
    state.n_aborted = await _abort_running(conn, run_id, reason="in flight when the orchestrator stopped; requeued on restart")
    await conn.execute(
        update(SAMPLES)
        .where(SAMPLES.c.run_id == run_id, SAMPLES.c.state == SampleState.quarantined)
        .values(state=SampleState.pending, updated_at=now)
    )
    state.group_ids = set((await conn.scalars(select(GROUPS.c.group_id).where(GROUPS.c.run_id == run_id))).all())
    pending = await conn.execute(
        select(SAMPLES.c.sample_id, SAMPLES.c.group_id, SAMPLES.c.sample_idx, SAMPLES.c.n_attempts,
               GROUPS.c.task, GROUPS.c.env_id, GROUPS.c.instance_id)
        .join(GROUPS, GROUPS.c.group_id == SAMPLES.c.group_id)
        .where(SAMPLES.c.run_id == run_id, SAMPLES.c.state == SampleState.pending)
        .order_by(GROUPS.c.created_at, SAMPLES.c.sample_id)
    )
    state.pending = [
        SampleRef(r.sample_id, r.group_id, r.sample_idx, run_id, r.task, r.env_id, r.instance_id, r.n_attempts)
        for r in pending
    ]
    state.n_done = len(
        (await conn.scalars(select(SAMPLES.c.sample_id).where(
            SAMPLES.c.run_id == run_id, SAMPLES.c.state == SampleState.done))).all()
    )
    return state


async def _abort_running(conn: AsyncConnection, run_id: str, reason: str) -> int:
    running = (await conn.execute(
        select(SAMPLES.c.sample_id, SAMPLES.c.rollout_id, SAMPLES.c.group_id,
               GROUPS.c.task, GROUPS.c.env_id, GROUPS.c.instance_id)
        .join(GROUPS, GROUPS.c.group_id == SAMPLES.c.group_id)
        .where(SAMPLES.c.run_id == run_id, SAMPLES.c.state == SampleState.running)
    )).all()
    known = set((await conn.scalars(
        select(TRAJ.c.rollout_id).where(TRAJ.c.rollout_id.in_([r.rollout_id for r in running]))
    )).all()) if running else set()
    for r in running:
        if r.rollout_id in known:
            continue
        traj = Trajectory(r.rollout_id, run_id, r.group_id, r.env_id, r.instance_id,
                          status=RolloutStatus.aborted, reason=reason)
        await conn.execute(insert(TRAJ).values(**to_values(traj, sample_id=r.sample_id, task=r.task)))
    await conn.execute(
        update(SAMPLES)
        .where(SAMPLES.c.run_id == run_id, SAMPLES.c.state == SampleState.running)
        .values(state=SampleState.pending, updated_at=utcnow())
    )
    return len(running)


async def set_run_status(conn: AsyncConnection, run_id: str, status: RunStatus) -> None:
    """Records where the run stands (completed, interrupted)."""
    await conn.execute(update(RUNS).where(RUNS.c.run_id == run_id).values(status=status, updated_at=utcnow()))


async def quarantine(conn: AsyncConnection, run_id: str, task: str) -> int:
    """Parks the task's pending samples (a restart requeues them); returns how many."""
    group_ids = select(GROUPS.c.group_id).where(GROUPS.c.run_id == run_id, GROUPS.c.task == task)
    result = await conn.execute(
        update(SAMPLES)
        .where(SAMPLES.c.group_id.in_(group_ids), SAMPLES.c.state == SampleState.pending)
        .values(state=SampleState.quarantined, updated_at=utcnow())
    )
    return result.rowcount
