"""Hands complete groups to learners: atomic claims with a lease, acked once consumed.

A group is claimable when it is complete, not consumed, and either never claimed or its claim
expired. PostgreSQL picks rows with ``SELECT ... FOR UPDATE SKIP LOCKED`` so that concurrent
claimers never wait on or take each other's rows; SQLite claims with one ``UPDATE ... WHERE
group_id IN (SELECT ... LIMIT n) RETURNING`` inside a ``BEGIN IMMEDIATE`` transaction, which
holds the database's single write lock for the whole statement.

A run trains with one learner at a time (two would train the same policy's next version twice):
each learner has its own identity (:func:`new_learner_id`) and takes the run's *seat* at start
(:func:`take_seat`), refused while another live learner holds it; each fenced claim renews the
seat, and a learner whose seat another took is refused its next claim (:class:`LearnerBusyError`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import and_, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from gymfleet.core.records import ClaimedGroup, Trajectory
from gymfleet.orchestrator.store.codec import from_row
from gymfleet.orchestrator.store.errors import ClaimExpiredError, LearnerBusyError
from gymfleet.orchestrator.store.leases import new_owner, owner_is_gone
from gymfleet.orchestrator.store.schema import (
    GroupRow,
    LearnerSeatRow,
    SampleRow,
    SampleState,
    TrajectoryRow,
    utcnow,
)

GROUPS, SAMPLES, TRAJ = GroupRow.__table__, SampleRow.__table__, TrajectoryRow.__table__
SEATS = LearnerSeatRow.__table__
LEARNER_PREFIX = "learner@"


@dataclass
class Claim:
    """Groups held by one claimer until ``expires_at`` (then anyone may claim them again)."""

    token: str
    claimer: str
    expires_at: datetime
    groups: list[ClaimedGroup] = field(default_factory=list)

    @property
    def group_ids(self) -> list[str]:
        return [g.group_id for g in self.groups]


def _claimable(now: datetime, run_id: str | None):  # noqa: ANN202 - a SQL expression
    cond = and_(
        GROUPS.c.completed_at.is_not(None),
        GROUPS.c.consumed_at.is_(None),
        or_(GROUPS.c.claim_expires_at.is_(None), GROUPS.c.claim_expires_at < now),
    )
    return and_(cond, GROUPS.c.run_id == run_id) if run_id is not None else cond


def new_learner_id() -> str:
    """A fresh learner identity, ``learner@host:pid:token`` (unique per learner process)."""
    return LEARNER_PREFIX + new_owner()


async def take_seat(conn: AsyncConnection, run_id: str, learner: str, lease_s: float) -> int:
    """Makes ``learner`` the run's one learner, and gives back the groups that other claimers
    (a dead predecessor) still hold on the run, so the new learner need not wait out their leases.

    Args:
        learner: this learner's identity (:func:`new_learner_id`).
        lease_s: seconds the seat holds unless a fenced claim renews it.

    Returns:
        How many groups were given back.

    Raises:
        LearnerBusyError: another learner holds the seat with a live lease (and, on this host,
            a live process).
    """
    await _hold_seat(conn, run_id, learner, lease_s, starting=True)
    result = await conn.execute(
        update(GROUPS).where(GROUPS.c.run_id == run_id, GROUPS.c.consumed_at.is_(None),
                             GROUPS.c.claimed_by.is_not(None), GROUPS.c.claimed_by != learner)
        .values(claimed_by=None, claim_token=None, claim_expires_at=None)
    )
    return int(result.rowcount)


async def leave_seat(conn: AsyncConnection, run_id: str, learner: str) -> None:
    """Empties the run's seat if ``learner`` holds it (a clean stop); its claims stay as they are."""
    await conn.execute(update(SEATS).where(SEATS.c.run_id == run_id, SEATS.c.learner == learner)
                       .values(learner=None, expires_at=None))


async def _hold_seat(conn: AsyncConnection, run_id: str, learner: str, lease_s: float, *, starting: bool) -> None:
    """Takes or renews the seat for ``learner`` (row-locked on PostgreSQL; SQLite's ``BEGIN
    IMMEDIATE`` already serialises); raises :class:`LearnerBusyError` if another live one holds it."""
    now = utcnow()
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    await conn.execute(dialect.insert(SEATS).values(run_id=run_id).on_conflict_do_nothing())
    pick = select(SEATS.c.learner, SEATS.c.expires_at).where(SEATS.c.run_id == run_id)
    if conn.dialect.name == "postgresql":
        pick = pick.with_for_update()
    held = (await conn.execute(pick)).one()
    if held.learner not in (None, learner) and held.expires_at is not None and held.expires_at > now \
            and not owner_is_gone(held.learner.removeprefix(LEARNER_PREFIX)):
        left_s = (held.expires_at - now).total_seconds()
        what = "a second learner cannot start" if starting else f"{learner} was fenced off: its seat was taken"
        raise LearnerBusyError(
            f"run {run_id} already has a live learner ({held.learner}); {what}. One learner trains a run: "
            f"stop the other one, or wait for its seat to lapse (in {left_s:.0f} s if it died)")
    await conn.execute(update(SEATS).where(SEATS.c.run_id == run_id)
                       .values(learner=learner, expires_at=now + timedelta(seconds=lease_s)))


async def claim_groups(
    conn: AsyncConnection, n: int, claimer: str, lease_s: float, run_id: str | None = None, *, fence: bool = False
) -> Claim:
    """Claims up to ``n`` complete groups, the earliest created first (then the earliest
    completed): a group started earlier was sampled from an older policy version, so it is the
    one nearest to going stale (a later group that finished sooner waits its turn).

    Args:
        n: most groups to claim.
        claimer: who claims (a learner's identity), stored for people and fencing.
        lease_s: seconds the claim holds; an unacked claim expires then and the groups become
            claimable again (a dead claimer loses nothing).
        run_id: only groups of this run (None: any run).
        fence: ``claimer`` is the run's seated learner (:func:`take_seat`): the claim renews the
            seat, and is refused if another learner took it.

    Returns:
        The claim; ``groups`` may be empty.

    Raises:
        LearnerBusyError: ``fence`` and another live learner holds the run's seat.
    """
    if fence:
        if run_id is None:
            raise ValueError("a fenced claim names its run")
        await _hold_seat(conn, run_id, claimer, lease_s, starting=False)
    now = utcnow()
    token = uuid.uuid4().hex
    values = dict(claimed_by=claimer, claim_token=token, claim_expires_at=now + timedelta(seconds=lease_s))
    pick = select(GROUPS.c.group_id).where(_claimable(now, run_id)).order_by(GROUPS.c.created_at, GROUPS.c.completed_at).limit(n)
    if conn.dialect.name == "postgresql":
        ids = list((await conn.scalars(pick.with_for_update(skip_locked=True))).all())
        if ids:
            await conn.execute(update(GROUPS).where(GROUPS.c.group_id.in_(ids)).values(**values))
    else:
        stmt = (
            update(GROUPS)
            .where(GROUPS.c.group_id.in_(pick.scalar_subquery()), _claimable(now, run_id))
            .values(**values)
            .returning(GROUPS.c.group_id)
        )
        ids = list((await conn.scalars(stmt)).all())
    return Claim(token, claimer, values["claim_expires_at"], await _load_groups(conn, ids))


async def _load_groups(conn: AsyncConnection, group_ids: list[str]) -> list[ClaimedGroup]:
    if not group_ids:
        return []
    groups = (await conn.execute(select(GROUPS).where(GROUPS.c.group_id.in_(group_ids))
                                 .order_by(GROUPS.c.completed_at))).all()
    rows = (await conn.execute(
        select(TRAJ)
        .join(SAMPLES, and_(SAMPLES.c.rollout_id == TRAJ.c.rollout_id, SAMPLES.c.state == SampleState.done))
        .where(SAMPLES.c.group_id.in_(group_ids))
        .order_by(SAMPLES.c.sample_idx)
    )).all()
    by_group: dict[str, list[Trajectory]] = {g: [] for g in group_ids}
    by_rollout: dict[str, Trajectory] = {}
    for row in rows:
        by_group[row.group_id].append(by_rollout.setdefault(row.rollout_id, from_row(row)))
    branches = (await conn.execute(  # other leaves of a harness session tree (Trajectory.branches)
        select(TRAJ).where(TRAJ.c.group_id.in_(group_ids), TRAJ.c.rollout_id.like("%#%"))
        .order_by(TRAJ.c.rollout_id))).all()
    for row in branches:
        branch = from_row(row)
        main = by_rollout.get(str(branch.metrics.get("branch_of", "")))
        if main is not None:
            main.branches.append(branch)
    return [ClaimedGroup(g.group_id, by_group[g.group_id], task=g.task, run_id=g.run_id, env_id=g.env_id,
                         instance_id=g.instance_id) for g in groups]


async def ack(conn: AsyncConnection, claim: Claim) -> None:
    """Marks the claim's groups consumed (never handed out again).

    Raises:
        ClaimExpiredError: some group is no longer held by this claim (its lease ran out and
            another claimer took it); nothing is acked then.
    """
    await _settle(conn, claim, dict(consumed_at=utcnow()))


async def release(conn: AsyncConnection, claim: Claim) -> None:
    """Gives the claim's groups back unconsumed (claimable again at once).

    Raises:
        ClaimExpiredError: as :func:`ack`.
    """
    await _settle(conn, claim, dict(claimed_by=None, claim_token=None, claim_expires_at=None))


async def _settle(conn: AsyncConnection, claim: Claim, values: dict) -> None:
    ids = claim.group_ids
    if not ids:
        return
    held = and_(GROUPS.c.group_id.in_(ids), GROUPS.c.claim_token == claim.token, GROUPS.c.consumed_at.is_(None))
    result = await conn.execute(update(GROUPS).where(held).values(**values))
    if result.rowcount != len(ids):
        raise ClaimExpiredError(
            f"claim {claim.token} by {claim.claimer}: {len(ids) - result.rowcount} of {len(ids)} groups "
            f"are no longer held (lease expired at {claim.expires_at.isoformat()} and they were "
            "re-claimed); claim with a longer lease_s"
        )


async def consume(conn: AsyncConnection, group_ids: list[str]) -> int:
    """Marks groups consumed by id, whoever holds them (a learner acking what its published
    weights were trained on, possibly after a restart that lost the claim token). Idempotent.

    Returns:
        How many groups this call marked (already consumed ones are not counted).
    """
    if not group_ids:
        return 0
    result = await conn.execute(
        update(GROUPS).where(GROUPS.c.group_id.in_(group_ids), GROUPS.c.consumed_at.is_(None))
        .values(consumed_at=utcnow())
    )
    return int(result.rowcount)


async def release_claimer(conn: AsyncConnection, claimer: str, run_id: str | None = None) -> int:
    """Gives back every unconsumed group ``claimer`` holds (a restarted learner taking back what
    its dead predecessor held, instead of waiting for the leases). Returns how many."""
    cond = and_(GROUPS.c.claimed_by == claimer, GROUPS.c.consumed_at.is_(None))
    if run_id is not None:
        cond = and_(cond, GROUPS.c.run_id == run_id)
    result = await conn.execute(
        update(GROUPS).where(cond).values(claimed_by=None, claim_token=None, claim_expires_at=None)
    )
    return int(result.rowcount)
