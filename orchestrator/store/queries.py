"""Read-only queries behind `gymfleet runs list|show`: run summaries, per-task tallies, trajectories."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from gymfleet.core.records import RolloutStatus, Trajectory
from gymfleet.orchestrator.store.codec import from_row
from gymfleet.orchestrator.store.errors import RunNotFoundError
from gymfleet.orchestrator.store.schema import GroupRow, RunRow, SampleRow, SampleState, TrajectoryRow

GROUPS, TRAJ, RUNS, SAMPLES = GroupRow.__table__, TrajectoryRow.__table__, RunRow.__table__, SampleRow.__table__


@dataclass
class TaskSummary:
    """Tallies of one task of a run."""

    task: str
    env_id: str
    by_status: dict[str, int] = field(default_factory=dict)
    mean_reward_ok: float | None = None
    """Mean reward over trajectories with status ok or truncated."""

    @property
    def n_trajectories(self) -> int:
        return sum(self.by_status.values())


@dataclass
class RunSummary:
    """One run at a glance."""

    run_id: str
    status: str
    created_at: datetime
    updated_at: datetime
    n_starts: int
    n_groups: int = 0
    n_groups_complete: int = 0
    n_running: int = 0
    """Samples some orchestrator runs now (state ``running``): the rollouts in flight."""
    tasks: list[TaskSummary] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def by_status(self) -> dict[str, int]:
        total: dict[str, int] = defaultdict(int)
        for task in self.tasks:
            for status, n in task.by_status.items():
                total[status] += n
        return dict(total)

    @property
    def n_trajectories(self) -> int:
        return sum(self.by_status.values())


@dataclass(frozen=True)
class StoredTrajectory:
    """A trajectory with the store's bookkeeping."""

    trajectory: Trajectory
    task: str
    created_at: datetime


async def list_runs(conn: AsyncConnection) -> list[RunSummary]:
    """Every run, newest first, with per-task tallies."""
    runs = (await conn.execute(select(RUNS).order_by(RUNS.c.created_at.desc()))).all()
    return [await _summary(conn, r) for r in runs]


async def run_summary(conn: AsyncConnection, run_id: str) -> RunSummary:
    """One run's summary, config included.

    Raises:
        RunNotFoundError: no such run (the message lists the known ones).
    """
    row = (await conn.execute(select(RUNS).where(RUNS.c.run_id == run_id))).first()
    if row is None:
        known = (await conn.scalars(select(RUNS.c.run_id).order_by(RUNS.c.run_id))).all()
        raise RunNotFoundError(f"no run {run_id!r} in this store; runs here: {', '.join(known) or 'none'}")
    summary = await _summary(conn, row)
    summary.config = dict(row.config or {})
    return summary


async def _summary(conn: AsyncConnection, run: Any) -> RunSummary:
    summary = RunSummary(run.run_id, str(getattr(run.status, "value", run.status)), run.created_at,
                         run.updated_at, run.n_starts)
    counts = await conn.execute(
        select(func.count(GROUPS.c.group_id), func.count(GROUPS.c.completed_at)).where(GROUPS.c.run_id == run.run_id)
    )
    summary.n_groups, summary.n_groups_complete = counts.one()
    summary.n_running = int(await conn.scalar(select(func.count()).select_from(SAMPLES).where(
        SAMPLES.c.run_id == run.run_id, SAMPLES.c.state == SampleState.running)) or 0)
    tally = await conn.execute(
        select(TRAJ.c.task, TRAJ.c.env_id, TRAJ.c.status, func.count(), func.avg(TRAJ.c.reward))
        .where(TRAJ.c.run_id == run.run_id)
        .group_by(TRAJ.c.task, TRAJ.c.env_id, TRAJ.c.status)
        .order_by(TRAJ.c.task)
    )
    tasks: dict[tuple[str, str], TaskSummary] = {}
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for task, env_id, status, n, mean in tally:
        entry = tasks.setdefault((task, env_id), TaskSummary(task, env_id))
        status = RolloutStatus(status).value
        entry.by_status[status] = n
        if status in {"ok", "truncated"}:
            sums[(task, env_id)][0] += float(mean or 0.0) * n
            sums[(task, env_id)][1] += n
    for key, entry in tasks.items():
        total, n = sums[key]
        entry.mean_reward_ok = total / n if n else None
    summary.tasks = list(tasks.values())
    return summary


async def trajectories(
    conn: AsyncConnection,
    run_id: str,
    *,
    limit: int | None = 20,
    status: RolloutStatus | None = None,
    task: str | None = None,
    rollout_id: str | None = None,
) -> list[StoredTrajectory]:
    """Trajectories of a run, oldest first, optionally filtered."""
    stmt = select(TRAJ).where(TRAJ.c.run_id == run_id).order_by(TRAJ.c.created_at, TRAJ.c.rollout_id)
    if status is not None:
        stmt = stmt.where(TRAJ.c.status == status)
    if task is not None:
        stmt = stmt.where(TRAJ.c.task == task)
    if rollout_id is not None:
        stmt = stmt.where(TRAJ.c.rollout_id == rollout_id)
    if limit is not None:
        stmt = stmt.limit(limit)
    return [StoredTrajectory(from_row(r), r.task, r.created_at) for r in await conn.execute(stmt)]
