"""Sample leases: which orchestrator holds which samples of a run, so that several share one run.

An orchestrator (an *owner*, named by :func:`new_owner`) claims pending samples in batches and
holds each with a lease that its heartbeat renews (:func:`renew`). PostgreSQL picks the rows with
``SELECT ... FOR UPDATE SKIP LOCKED``, so concurrent claimers never wait on or take each other's
rows (the pattern of ``claims.py``); SQLite's ``BEGIN IMMEDIATE`` serialises them. A sample whose
lease ran out (its owner died or stalled) is requeued by whoever claims next: a running one is
recorded as an aborted trajectory and becomes pending again; a pending one is simply claimable.

Every statement that locks sample rows without ``SKIP LOCKED`` (the writer's finishes) locks them
in ``sample_id`` order, and every other one skips locked rows: no two orchestrators deadlock.

SQLite runs also carry a run lease: a second live orchestrator is refused at start
(:class:`RunBusyError`), since SQLite takes one writer at a time on one machine.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gymfleet.core.records import RolloutStatus, Trajectory
from gymfleet.orchestrator.store.codec import to_values
from gymfleet.orchestrator.store.errors import RunBusyError
from gymfleet.orchestrator.store.schema import (
    GroupRow,
    RunRow,
    SampleRow,
    SampleState,
    TrajectoryRow,
    utcnow,
)

GROUPS, SAMPLES, TRAJ, RUNS = GroupRow.__table__, SampleRow.__table__, TrajectoryRow.__table__, RunRow.__table__
HELD = (SampleState.pending, SampleState.running)


def new_owner() -> str:
    """A fresh owner name, ``host:pid:token`` (unique per orchestrator, readable by people)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_is_gone(owner: str) -> bool:
    """True when ``owner`` ran on this host and its process no longer exists (a killed
    orchestrator whose leases need not be waited out). False when unsure (another host)."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    return False


def lapsed(now: datetime, gone: Iterable[str] = ()):  # noqa: ANN201 - a SQL expression
    """SQL: nobody holds the sample (no lease, an expired one, or an owner in ``gone``)."""
    cond = or_(SAMPLES.c.lease_owner.is_(None), SAMPLES.c.lease_expires_at < now)
    gone = list(gone)
    return or_(cond, SAMPLES.c.lease_owner.in_(gone)) if gone else cond


def skip_locked(conn: AsyncConnection, stmt):  # noqa: ANN001, ANN201 - a SELECT
    """``stmt`` locking the sample rows it reads, skipping rows others hold (PostgreSQL; SQLite's
    ``BEGIN IMMEDIATE`` already holds the whole database)."""
    return stmt.with_for_update(skip_locked=True, of=SAMPLES) if conn.dialect.name == "postgresql" else stmt


async def gone_owners(conn: AsyncConnection, run_id: str) -> list[str]:
    """Owners of the run's held samples whose process is gone from this host (see
    :func:`owner_is_gone`)."""
    owners = (await conn.scalars(
        select(SAMPLES.c.lease_owner).distinct()
        .where(SAMPLES.c.run_id == run_id, SAMPLES.c.state.in_(HELD), SAMPLES.c.lease_owner.is_not(None))
    )).all()
    return [o for o in owners if owner_is_gone(o)]


async def requeue_lapsed(conn: AsyncConnection, run_id: str, reason: str, gone: Iterable[str] = ()) -> int:
    """Turns the run's running samples nobody holds any more (lease expired, none, or an owner in
    ``gone``) into aborted trajectories and pending samples; a live lease is never touched.

    Returns:
        How many samples were requeued.
    """
    now = utcnow()
    running = (await conn.execute(skip_locked(conn, (
        select(SAMPLES.c.sample_id, SAMPLES.c.rollout_id, SAMPLES.c.group_id,
               GROUPS.c.task, GROUPS.c.env_id, GROUPS.c.instance_id)
        .join(GROUPS, GROUPS.c.group_id == SAMPLES.c.group_id)
        .where(SAMPLES.c.run_id == run_id, SAMPLES.c.state == SampleState.running, lapsed(now, gone))
        .order_by(SAMPLES.c.sample_id)
    )))).all()
    if not running:
        return 0
    known = set((await conn.scalars(
        select(TRAJ.c.rollout_id).where(TRAJ.c.rollout_id.in_([r.rollout_id for r in running]))
    )).all())
    aborted = [
        to_values(Trajectory(r.rollout_id, run_id, r.group_id, r.env_id, r.instance_id,
                             status=RolloutStatus.aborted, reason=reason), sample_id=r.sample_id, task=r.task)
        for r in running if r.rollout_id not in known
    ]
    if aborted:
        await conn.execute(insert(TRAJ), aborted)
    await conn.execute(
        update(SAMPLES).where(SAMPLES.c.sample_id.in_([r.sample_id for r in running]))
        .values(state=SampleState.pending, lease_owner=None, lease_expires_at=None, updated_at=now)
    )
    return len(running)


async def renew(conn: AsyncConnection, run_id: str, owner: str, lease_s: float) -> int:
    """Extends every lease ``owner`` holds on the run by ``lease_s`` seconds from now (the
    heartbeat). Rows another transaction has locked are skipped (they are being finished);
    returns how many samples were renewed."""
    expires = utcnow() + timedelta(seconds=lease_s)
    mine = skip_locked(conn, select(SAMPLES.c.sample_id).where(
        SAMPLES.c.run_id == run_id, SAMPLES.c.lease_owner == owner, SAMPLES.c.state.in_(HELD)))
    result = await conn.execute(
        update(SAMPLES).where(SAMPLES.c.sample_id.in_(mine.scalar_subquery())).values(lease_expires_at=expires)
    )
    await conn.execute(update(RUNS).where(RUNS.c.run_id == run_id, RUNS.c.lease_owner == owner)
                       .values(lease_expires_at=expires))
    return int(result.rowcount)


async def release(conn: AsyncConnection, run_id: str, owner: str) -> int:
    """Gives back what ``owner`` holds on the run: its claimed but unstarted samples (claimable
    at once) and the run lease. Running samples keep their lease (it runs out, or a restart on
    this host sees the owner gone). Returns how many samples were released."""
    result = await conn.execute(
        update(SAMPLES).where(SAMPLES.c.run_id == run_id, SAMPLES.c.lease_owner == owner,
                              SAMPLES.c.state != SampleState.running)
        .values(lease_owner=None, lease_expires_at=None)
    )
    await conn.execute(update(RUNS).where(RUNS.c.run_id == run_id, RUNS.c.lease_owner == owner)
                       .values(lease_owner=None, lease_expires_at=None))
    return int(result.rowcount)


async def hold_run(conn: AsyncConnection, run_id: str, owner: str, lease_s: float, url: str = "") -> None:
    """SQLite: takes the run lease for ``owner``; PostgreSQL: nothing (any number may work on a run).

    Raises:
        RunBusyError: another orchestrator holds the run with a live lease.
    """
    if conn.dialect.name != "sqlite":
        return
    now = utcnow()
    row = (await conn.execute(select(RUNS.c.lease_owner, RUNS.c.lease_expires_at)
                              .where(RUNS.c.run_id == run_id))).first()
    if row is not None and row.lease_owner not in (None, owner) and row.lease_expires_at is not None \
            and row.lease_expires_at > now and not owner_is_gone(row.lease_owner):
        left_s = (row.lease_expires_at - now).total_seconds()
        raise RunBusyError(
            f"run {run_id} is held by another live orchestrator ({row.lease_owner}) on the SQLite store "
            f"{url or conn.engine.url.database}: a SQLite run takes one orchestrator at a time; to run several "
            "on one run, use a PostgreSQL store (store: postgresql://USER:PASS@HOST/DB), or stop the other one "
            f"(if it died, its lease runs out in {left_s:.0f} s)")
    await conn.execute(update(RUNS).where(RUNS.c.run_id == run_id).values(
        lease_owner=owner, lease_expires_at=now + timedelta(seconds=lease_s)))
