"""The viewer's read-only SQL: runs, one run's tallies, pages of trajectories and groups, one trajectory.

Every list is a page: keyset pagination (newest first, ``created_at`` then id, the cursor being the
last row's pair, compared as a row value so that the index range starts at the cursor), never
``OFFSET``, so page 1,000 costs what page 1 does; the run-wide tallies
read only the covering index ``ix_trajectories_view`` (migration 0004), never the token arrays.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, cast, func, literal, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from gymfleet.core.records import RolloutStatus
from gymfleet.orchestrator import DTYPES, bytes_to_array, GroupRow, RunRow, SampleRow, SampleState, TrajectoryRow
from gymfleet.view.errors import NotFoundError
from gymfleet.view.records import (
    Cursor, GroupSummary, RewardPoint, RunOverview, RunRowView, SampleView, TrajectoryDetail, TrajectoryFilters,
    TrajectoryRowView, group_advantages,
)

GROUPS, TRAJ, RUNS, SAMPLES = GroupRow.__table__, TrajectoryRow.__table__, RunRow.__table__, SampleRow.__table__
SCORED = (RolloutStatus.ok, RolloutStatus.truncated)
"""Statuses whose reward is a grade (the mean rewards the viewer shows are over these)."""
LIST_COLUMNS = (TRAJ.c.rollout_id, TRAJ.c.group_id, TRAJ.c.sample_id, TRAJ.c.task, TRAJ.c.env_id,
                TRAJ.c.instance_id, TRAJ.c.status, TRAJ.c.reward, TRAJ.c.n_tokens, TRAJ.c.n_generated_tokens,
                TRAJ.c.policy_version_min, TRAJ.c.policy_version_max, TRAJ.c.reason, TRAJ.c.created_at)
"""What a list shows of a trajectory: never the arrays or the messages."""


@dataclass(frozen=True)
class _Cell:
    """One row of a run's tally: the rollouts of one (task, status, oldest, newest version)."""

    task: str
    status: RolloutStatus
    version_min: int
    version_max: int
    n: int
    reward_sum: float


async def _tally(conn: AsyncConnection, run_id: str) -> list[_Cell]:
    """The run's rollouts counted in one pass over the covering index ``ix_trajectories_view``
    (grouped in the index's own order: no sort, no table read); everything the runs and run
    pages show of the trajectories is summed from these few rows."""
    rows = await conn.execute(
        select(TRAJ.c.task, TRAJ.c.status, TRAJ.c.policy_version_min, TRAJ.c.policy_version_max, func.count(),
               func.sum(TRAJ.c.reward))
        .where(TRAJ.c.run_id == run_id)
        .group_by(TRAJ.c.task, TRAJ.c.status, TRAJ.c.policy_version_min, TRAJ.c.policy_version_max))
    return [_Cell(task, RolloutStatus(status), int(vmin), int(vmax), int(n), float(total or 0.0))
            for task, status, vmin, vmax, n, total in rows]


async def list_runs(conn: AsyncConnection) -> list[RunRowView]:
    """Every run of one store, newest first, with its rollouts by status and mean reward."""
    runs = (await conn.execute(select(RUNS).order_by(RUNS.c.created_at.desc()))).all()
    return [await _run_row(conn, run, await _tally(conn, run.run_id)) for run in runs]


async def _run_row(conn: AsyncConnection, run: Any, cells: list[_Cell]) -> RunRowView:
    by_status: dict[str, int] = {}
    for c in cells:
        by_status[c.status.value] = by_status.get(c.status.value, 0) + c.n
    scored = [c for c in cells if c.status in SCORED]
    n_scored = sum(c.n for c in scored)
    n_groups, n_complete = (await conn.execute(
        select(func.count(), func.count(GROUPS.c.completed_at)).where(GROUPS.c.run_id == run.run_id))).one()
    n_running = await conn.scalar(select(func.count()).select_from(SAMPLES).where(
        SAMPLES.c.run_id == run.run_id, SAMPLES.c.state == SampleState.running))
    return RunRowView(
        run_id=run.run_id, status=str(getattr(run.status, "value", run.status)),
        created_at=run.created_at, updated_at=run.updated_at, n_starts=run.n_starts,
        wall_s=(run.updated_at - run.created_at).total_seconds(), by_status=dict(sorted(by_status.items())),
        mean_reward=sum(c.reward_sum for c in scored) / n_scored if n_scored else None, n_groups=n_groups,
        n_groups_complete=n_complete, n_in_flight=int(n_running or 0), max_steps=(run.config or {}).get("max_steps"))


async def run_overview(conn: AsyncConnection, run_id: str) -> RunOverview:
    """One run: its row, tasks, reward per task over policy versions, version lag of its rollouts.

    Raises:
        NotFoundError: no such run in this store.
    """
    run = (await conn.execute(select(RUNS).where(RUNS.c.run_id == run_id))).first()
    if run is None:
        raise NotFoundError(f"no run {run_id!r} in this store")
    cells = await _tally(conn, run_id)
    points: dict[tuple[str, int], list[float]] = {}
    for c in cells:
        if c.status in SCORED:
            point = points.setdefault((c.task, c.version_max), [0, 0.0])
            point[0] += c.n
            point[1] += c.reward_sum
    rewards = [RewardPoint(task, version, int(n), total / n) for (task, version), (n, total) in sorted(points.items())]
    newest = max((c.version_max for c in cells), default=-1)
    lags: dict[int, int] = {}
    for c in cells:
        if c.version_min >= 0:
            lags[newest - c.version_min] = lags.get(newest - c.version_min, 0) + c.n
    in_flight = await conn.execute(
        select(GROUPS.c.task, func.count()).select_from(SAMPLES.join(GROUPS, SAMPLES.c.group_id == GROUPS.c.group_id))
        .where(SAMPLES.c.run_id == run_id, SAMPLES.c.state == SampleState.running).group_by(GROUPS.c.task))
    in_flight_by_task = {task: int(n) for task, n in in_flight}
    return RunOverview(run=await _run_row(conn, run, cells), config=dict(run.config or {}),
                       tasks=sorted({c.task for c in cells} | set(in_flight_by_task)), rewards=rewards,
                       newest_version=newest, version_lag=dict(sorted(lags.items())), in_flight_by_task=in_flight_by_task)


def _filtered(stmt: Any, run_id: str, f: TrajectoryFilters) -> Any:
    stmt = stmt.where(TRAJ.c.run_id == run_id)
    if f.task:
        stmt = stmt.where(TRAJ.c.task == f.task)
    if f.status:
        stmt = stmt.where(TRAJ.c.status == RolloutStatus(f.status))
    if f.min_reward is not None:
        stmt = stmt.where(TRAJ.c.reward >= f.min_reward)
    if f.max_reward is not None:
        stmt = stmt.where(TRAJ.c.reward <= f.max_reward)
    if f.version is not None:
        stmt = stmt.where(TRAJ.c.policy_version_min <= f.version, TRAJ.c.policy_version_max >= f.version)
    if f.text:
        stmt = stmt.where(_text_match(f.text))
    return stmt


def _text_match(text: str) -> Any:
    """Messages containing ``text``: matched on the stored JSON, so the term is JSON-escaped the
    way the store wrote it (non-ASCII as ``\\uXXXX``, quotes as ``\\"``). ASCII letters match in any
    case; other letters as typed, all lower case or all upper case (escapes carry no case)."""
    patterns = []
    for variant in dict.fromkeys((text, text.lower(), text.upper())):
        term = json.dumps(variant)[1:-1]
        patterns.append("%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
    column = cast(TRAJ.c.messages, Text)
    return or_(*(column.ilike(p, escape="\\") for p in patterns))


async def trajectory_page(conn: AsyncConnection, run_id: str, filters: TrajectoryFilters, *,
                          before: Cursor | None = None, after: Cursor | None = None,
                          limit: int = 50) -> list[TrajectoryRowView]:
    """One page of a run's trajectories, newest first.

    Args:
        before: the page after this cursor (older rows); None: the newest page.
        after: only rows newer than this cursor, oldest first (what a live page polls for).
        limit: most rows (1 to 500).
    """
    limit = max(1, min(limit, 500))
    stmt = _filtered(select(*LIST_COLUMNS), run_id, filters)
    key = (TRAJ.c.created_at, TRAJ.c.rollout_id)
    if after is not None:
        stmt = stmt.where(tuple_(*key) > tuple_(literal(after.created_at, TRAJ.c.created_at.type), literal(after.id)))
        stmt = stmt.order_by(*key)
    else:
        if before is not None:
            stmt = stmt.where(tuple_(*key) < tuple_(literal(before.created_at, TRAJ.c.created_at.type), literal(before.id)))
        stmt = stmt.order_by(key[0].desc(), key[1].desc())
    return [TrajectoryRowView.from_row(r) for r in await conn.execute(stmt.limit(limit))]


async def groups_page(conn: AsyncConnection, run_id: str, *, task: str | None = None,
                      before: Cursor | None = None, limit: int = 20) -> list[GroupSummary]:
    """One page of a run's groups, newest first, each with its samples' rewards and advantages."""
    limit = max(1, min(limit, 200))
    stmt = select(GROUPS).where(GROUPS.c.run_id == run_id)
    if task:
        stmt = stmt.where(GROUPS.c.task == task)
    if before is not None:
        stmt = stmt.where(tuple_(GROUPS.c.created_at, GROUPS.c.group_id)
                          < tuple_(literal(before.created_at, GROUPS.c.created_at.type), literal(before.id)))
    groups = (await conn.execute(stmt.order_by(GROUPS.c.created_at.desc(), GROUPS.c.group_id.desc()).limit(limit))).all()
    if not groups:
        return []
    rows = (await conn.execute(select(*LIST_COLUMNS).where(TRAJ.c.group_id.in_([g.group_id for g in groups]))
                               .order_by(TRAJ.c.sample_id, TRAJ.c.created_at))).all()
    by_group: dict[str, list[TrajectoryRowView]] = {}
    for r in rows:
        by_group.setdefault(r.group_id, []).append(TrajectoryRowView.from_row(r))
    return [_group(g, by_group.get(g.group_id, [])) for g in groups]


def _group(g: Any, trajectories: list[TrajectoryRowView]) -> GroupSummary:
    advantages = group_advantages([t.reward if t.trains else None for t in trajectories])
    samples = [SampleView(t, a) for t, a in zip(trajectories, advantages)]
    return GroupSummary(group_id=g.group_id, task=g.task, env_id=g.env_id, instance_id=g.instance_id, size=g.size,
                        n_done=g.n_done, created_at=g.created_at, completed_at=g.completed_at,
                        consumed=g.consumed_at is not None, samples=samples)


async def group_detail(conn: AsyncConnection, run_id: str, group_id: str) -> tuple[GroupSummary, dict[str, list]]:
    """One group with its samples, and each sample's messages (rollout id -> messages).

    Raises:
        NotFoundError: no such group in the run.
    """
    g = (await conn.execute(select(GROUPS).where(GROUPS.c.group_id == group_id, GROUPS.c.run_id == run_id))).first()
    if g is None:
        raise NotFoundError(f"no group {group_id!r} in run {run_id!r}")
    rows = (await conn.execute(select(*LIST_COLUMNS, TRAJ.c.messages).where(TRAJ.c.group_id == group_id)
                               .order_by(TRAJ.c.sample_id, TRAJ.c.created_at))).all()
    group = _group(g, [TrajectoryRowView.from_row(r) for r in rows])
    return group, {r.rollout_id: list(r.messages or []) for r in rows}


async def trajectory_detail(conn: AsyncConnection, run_id: str, rollout_id: str) -> TrajectoryDetail:
    """One trajectory, token-exact.

    Raises:
        NotFoundError: no such rollout in the run.
    """
    row = (await conn.execute(select(TRAJ).where(TRAJ.c.rollout_id == rollout_id, TRAJ.c.run_id == run_id))).first()
    if row is None:
        raise NotFoundError(f"no trajectory {rollout_id!r} in run {run_id!r}")
    arrays = {name: bytes_to_array(getattr(row, name), dtype) for name, dtype in DTYPES.items()}
    return TrajectoryDetail(summary=TrajectoryRowView.from_row(row), messages=list(row.messages or []),
                            metrics=dict(row.metrics or {}), timings=dict(row.timings or {}),
                            token_ids=arrays["token_ids"].tolist(), loss_mask=arrays["loss_mask"].tolist(),
                            logprobs=[round(float(x), 4) for x in arrays["logprobs"]],
                            versions=arrays["versions"].tolist())
