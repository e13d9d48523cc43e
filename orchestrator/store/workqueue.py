"""The durable work queue of a run: groups, their samples, claims on them, and what a start requeues.

A sample is pending until an orchestrator claims it (a lease, ``leases.py``) and starts an attempt
(running, with that attempt's rollout id); the attempt's trajectory either finishes it (done; the
group's ``n_done`` counts it and the group completes at ``n_done == size``) or sends it back to
pending (aborted, retried). A start turns every running sample nobody holds any more (its lease
ran out, or its owner's process is gone from this host) into an aborted trajectory and a pending
sample again; a live peer's samples are left alone. Group creation is idempotent, so several
orchestrators enumerating the same groups create each once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import case, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from gymfleet.core.records import Trajectory
from gymfleet.orchestrator.store import leases
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
DEFAULT_LEASE_S = 60.0
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
        pending: samples nobody holds, waiting to be claimed (requeued after a restart), in group order.
        group_ids: every group the run already holds (the scheduler never creates them again).
        n_aborted: running samples nobody held any more, recorded as aborted trajectories.
        n_done: samples already done.
    """

    restarted: bool
    pending: list[SampleRef] = field(default_factory=list)
    group_ids: set[str] = field(default_factory=set)
    n_aborted: int = 0
    n_done: int = 0


def insert_new(conn: AsyncConnection, table: Any):  # noqa: ANN201 - an INSERT
    """``INSERT ... ON CONFLICT DO NOTHING`` on ``table``: rows whose key exists are skipped."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(table).on_conflict_do_nothing()


async def create_groups(conn: AsyncConnection, groups: Sequence[GroupSpec]) -> list[str]:
    """Inserts the groups and their pending samples; a group that exists (a peer created it) is
    skipped, not an error. Inserts in ``group_id`` order (two creators never deadlock).

    Returns:
        The ids of the groups this call created.
    """
    ordered = sorted({g.group_id: g for g in groups}.values(), key=lambda g: g.group_id)
    if not ordered:
        return []
    now = utcnow()
    created = set((await conn.scalars(
        insert_new(conn, GROUPS).returning(GROUPS.c.group_id),
        [dict(group_id=g.group_id, run_id=g.run_id, task=g.task, env_id=g.env_id, instance_id=g.instance_id,
              size=g.size, n_done=0, created_at=now) for g in ordered],
    )).all())
    fresh = [g for g in ordered if g.group_id in created]
    if fresh:
        await conn.execute(insert(SAMPLES), [
            dict(sample_id=sid, run_id=g.run_id, group_id=g.group_id, sample_idx=i, state=SampleState.pending,
                 n_attempts=0, rollout_id=None, updated_at=now)
            for g in fresh for i, sid in enumerate(g.sample_ids())])
    return [g.group_id for g in fresh]


async def create_group(conn: AsyncConnection, group: GroupSpec) -> bool:
    """Inserts the group and its pending samples; False (and nothing written) when it exists."""
    return bool(await create_groups(conn, [group]))


@dataclass
class SampleClaim:
    """What one claim got.

    Attributes:
        samples: the samples now leased to the claimer, oldest group first.
        n_created: groups this claim created (0 when a peer had created them already).
        n_requeued: running samples of dead or stalled owners this claim requeued (whoever's task).
        n_open_elsewhere: when nothing was claimed, the task's samples still pending or running
            under someone else's live lease (they may come back when that lease runs out).
    """

    samples: list[SampleRef] = field(default_factory=list)
    n_created: int = 0
    n_requeued: int = 0
    n_open_elsewhere: int = 0




async def claim_samples(
    conn: AsyncConnection,
    run_id: str,
    task: str,
    owner: str,
    n: int,
    lease_s: float,
    next_groups: Callable[[int], list[GroupSpec]] | None = None,
    requeue: bool = True,
) -> SampleClaim:
    """Leases up to ``n`` pending samples of ``task`` to ``owner``, creating groups when short.

    First requeues the run's lapsed running samples (:func:`leases.requeue_lapsed`; skipped with
    ``requeue=False``, the caller did it recently), then claims pending
    samples nobody holds, oldest group first; while fewer than ``n``, asks ``next_groups`` for
    groups to create (idempotently: a peer may have created them already) and claims again.

    Args:
        n: most samples to claim.
        lease_s: seconds the lease holds unless renewed.
        next_groups: called with the number of samples still wanted; returns the groups to create
            (empty: none left). None: create nothing.
        requeue: look for lapsed running samples first.

    Returns:
        The claim.
    """
    out = SampleClaim()
    if requeue:
        out.n_requeued = await leases.requeue_lapsed(
            conn, run_id, "in flight under a lease that ran out (its orchestrator died or stalled); requeued")
    out.samples = await _claim(conn, run_id, task, owner, n, lease_s)
    while len(out.samples) < n and next_groups is not None:
        groups = next_groups(n - len(out.samples))
        if not groups:
            break
        out.n_created += len(await create_groups(conn, groups))
        out.samples += await _claim(conn, run_id, task, owner, n - len(out.samples), lease_s)
    if not out.samples:
        out.n_open_elsewhere = int(await conn.scalar(
            select(func.count()).select_from(SAMPLES.join(GROUPS, GROUPS.c.group_id == SAMPLES.c.group_id))
            .where(SAMPLES.c.run_id == run_id, GROUPS.c.task == task, SAMPLES.c.state.in_(leases.HELD),
                   or_(SAMPLES.c.lease_owner.is_(None), SAMPLES.c.lease_owner != owner))
        ) or 0)
    return out


async def _claim(conn: AsyncConnection, run_id: str, task: str, owner: str, n: int, lease_s: float) -> list[SampleRef]:
    now = utcnow()
    rows = (await conn.execute(leases.skip_locked(conn, (
        select(SAMPLES.c.sample_id, SAMPLES.c.group_id, SAMPLES.c.sample_idx, SAMPLES.c.n_attempts,
               GROUPS.c.task, GROUPS.c.env_id, GROUPS.c.instance_id)
        .join(GROUPS, GROUPS.c.group_id == SAMPLES.c.group_id)
        .where(SAMPLES.c.run_id == run_id, GROUPS.c.task == task, SAMPLES.c.state == SampleState.pending,
               leases.lapsed(now))
        .order_by(GROUPS.c.created_at, SAMPLES.c.sample_id)
        .limit(n)
    )))).all()
    if not rows:
        return []
    await conn.execute(
        update(SAMPLES).where(SAMPLES.c.sample_id.in_([r.sample_id for r in rows]))
        .values(lease_owner=owner, lease_expires_at=now + timedelta(seconds=lease_s))
    )
    return [SampleRef(r.sample_id, r.group_id, r.sample_idx, run_id, r.task, r.env_id, r.instance_id, r.n_attempts)
            for r in rows]


async def start_sample(conn: AsyncConnection, sample_id: str, rollout_id: str) -> None:
    """Marks the sample running under attempt ``rollout_id`` (its lease, if any, is kept)."""
    await conn.execute(
        update(SAMPLES)
        .where(SAMPLES.c.sample_id == sample_id)
        .values(state=SampleState.running, rollout_id=rollout_id,
                n_attempts=SAMPLES.c.n_attempts + 1, updated_at=utcnow())
    )


async def lock_samples(conn: AsyncConnection, sample_ids: set[str]) -> dict[str, tuple[str | None, SampleState]]:
    """Each sample's current (rollout_id, state), the rows locked until commit on PostgreSQL in
    ``sample_id`` order (a peer requeueing them waits, or skips them)."""
    if not sample_ids:
        return {}
    stmt = (select(SAMPLES.c.sample_id, SAMPLES.c.rollout_id, SAMPLES.c.state)
            .where(SAMPLES.c.sample_id.in_(sample_ids)).order_by(SAMPLES.c.sample_id))
    if conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    return {r.sample_id: (r.rollout_id, r.state) for r in await conn.execute(stmt)}


async def recorded(conn: AsyncConnection, rollout_ids: list[str]) -> set[str]:
    """Those of ``rollout_ids`` that already have a trajectory."""
    if not rollout_ids:
        return set()
    return set((await conn.scalars(select(TRAJ.c.rollout_id).where(TRAJ.c.rollout_id.in_(rollout_ids)))).all())


def settled_values(final: bool, keep_lease: bool) -> dict[str, Any]:
    """The sample's new columns when an attempt that owned it ends."""
    values: dict[str, Any] = {"state": SampleState.done if final else SampleState.pending}
    if final or not keep_lease:
        values.update(lease_owner=None, lease_expires_at=None)
    return values


async def finish(
    conn: AsyncConnection, traj: Trajectory, *, sample_id: str | None, task: str, final: bool,
    keep_lease: bool = False,
) -> bool:
    """Inserts the trajectory (and its branches, a row each) and settles its sample; all or
    nothing (the caller's savepoint).

    Args:
        traj: the finished attempt.
        sample_id: its sample, or None for a trajectory outside any work queue.
        task: the task name, stored for queries.
        final: the attempt finishes the sample (False: back to pending, e.g. aborted).
        keep_lease: with ``final=False``: the owner keeps the sample leased (it retries it).

    Returns:
        True when the attempt settled its sample. False when the sample had moved on: the
        trajectory is stored, unless the attempt was already recorded (a peer requeued it as
        aborted after its lease ran out), then nothing is written.
    """
    owned = True
    if sample_id is not None:
        current = (await lock_samples(conn, {sample_id})).get(sample_id)
        owned = current == (traj.rollout_id, SampleState.running)
        if not owned and await recorded(conn, [traj.rollout_id]):
            return False
    await conn.execute(insert(TRAJ), [to_values(t, sample_id=sample_id, task=task) for t in (traj, *traj.branches)])
    if sample_id is None or not owned:
        return owned
    await conn.execute(update(SAMPLES).where(SAMPLES.c.sample_id == sample_id)
                       .values(**settled_values(final, keep_lease), updated_at=utcnow()))
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


async def start_run(
    conn: AsyncConnection, run_id: str, config: dict[str, Any], *, owner: str | None = None,
    lease_s: float = DEFAULT_LEASE_S, url: str = "",
) -> ResumeState:
    """Creates the run, or resumes it: running samples nobody holds any more become aborted
    trajectories and pending again, quarantined ones pending again; returns the queue to continue
    from. Several orchestrators may start the same run at once (PostgreSQL).

    Args:
        owner: the starting orchestrator (:func:`leases.new_owner`); None: no leases (a tool or
            test driving the queue by hand).
        lease_s: seconds the owner's leases hold unless renewed.
        url: the store URL, for messages.

    Raises:
        RunBusyError: SQLite, and another live orchestrator holds the run.
    """
    now = utcnow()
    created = (await conn.execute(
        insert_new(conn, RUNS).values(run_id=run_id, config=config, status=RunStatus.running,
                                      created_at=now, updated_at=now, n_starts=1)
    )).rowcount
    if owner is not None:
        await leases.hold_run(conn, run_id, owner, lease_s, url)
    if created == 1:
        return ResumeState(restarted=False)
    await conn.execute(
        update(RUNS).where(RUNS.c.run_id == run_id)
        .values(config=config, status=RunStatus.running, updated_at=now, n_starts=RUNS.c.n_starts + 1)
    )
    state = ResumeState(restarted=True)
    gone = await leases.gone_owners(conn, run_id)
    state.n_aborted = await leases.requeue_lapsed(
        conn, run_id, "in flight when the orchestrator stopped; requeued on restart", gone)
    if gone:
        await conn.execute(update(SAMPLES).where(SAMPLES.c.run_id == run_id, SAMPLES.c.lease_owner.in_(gone))
                           .values(lease_owner=None, lease_expires_at=None))
    await conn.execute(
        update(SAMPLES)
        .where(SAMPLES.c.run_id == run_id, SAMPLES.c.state == SampleState.quarantined)
        .values(state=SampleState.pending, lease_owner=None, lease_expires_at=None, updated_at=now)
    )
    state.group_ids = set((await conn.scalars(select(GROUPS.c.group_id).where(GROUPS.c.run_id == run_id))).all())
    pending = await conn.execute(
        select(SAMPLES.c.sample_id, SAMPLES.c.group_id, SAMPLES.c.sample_idx, SAMPLES.c.n_attempts,
               GROUPS.c.task, GROUPS.c.env_id, GROUPS.c.instance_id)
        .join(GROUPS, GROUPS.c.group_id == SAMPLES.c.group_id)
        .where(SAMPLES.c.run_id == run_id, SAMPLES.c.state == SampleState.pending, leases.lapsed(now))
        .order_by(GROUPS.c.created_at, SAMPLES.c.sample_id)
    )
    state.pending = [
        SampleRef(r.sample_id, r.group_id, r.sample_idx, run_id, r.task, r.env_id, r.instance_id, r.n_attempts)
        for r in pending
    ]
    state.n_done = int(await conn.scalar(select(func.count()).select_from(SAMPLES).where(
        SAMPLES.c.run_id == run_id, SAMPLES.c.state == SampleState.done)) or 0)
    return state


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
