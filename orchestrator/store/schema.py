"""The SQL schema of the trajectory store: runs, groups, samples (the work queue) and trajectories.

Token arrays are stored as raw little-endian numpy bytes (``LargeBinary``), never JSON. Alembic
owns the schema (``migrations/``); these typed ORM classes are its source of truth.

Tables::

    runs          one row per run id: resolved config, status
    learner_seats the one learner a run trains with (a second live one is refused or fenced)
    groups        the G samples of one task instance; completion and learner claims
    samples       one row per (group, sample index): the work queue that survives restarts,
                  each leased to the orchestrator running it
    trajectories  one row per rollout attempt, token-exact (docs/design.md, Trajectory)
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Enum, Float, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from gymfleet.core.records import RolloutStatus


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite drops the zone; this restores it)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("store datetimes must be timezone-aware (use datetime.now(UTC))")
        return value.astimezone(UTC).replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    """Now, timezone-aware UTC (the only clock the store uses)."""
    return datetime.now(UTC)


class RunStatus(str, enum.Enum):
    """Where a run stands: the one vocabulary of the store, ``runs list``, report.json's
    ``run_status`` and what ``gymfleet train`` prints, on one machine or a cluster (the values,
    e.g. ``completed (budget)``, are what people read)."""

    running = "running"
    interrupted = "interrupted"
    """Stopped before its work or budget was done (a signal, a quarantined task, a dead learner)."""
    completed = "completed"
    """Every group of every task done."""
    completed_budget = "completed (budget)"
    """A training run that spent its budget (learner steps or wall-clock seconds)."""
    failed = "failed"
    """A training job that stopped on an error after it started (its report's ``error`` says why)."""

    @property
    def finished(self) -> bool:
        """Whether the run ended as planned (its work done, or its budget spent)."""
        return self in (RunStatus.completed, RunStatus.completed_budget)


class SampleState(str, enum.Enum):
    """Where one sample of a group stands in the work queue."""

    pending = "pending"
    running = "running"
    done = "done"
    quarantined = "quarantined"


class Base(DeclarativeBase):
    """Declarative base of every store table."""


class RunRow(Base):
    """One run: its resolved config and status."""

    __tablename__ = "runs"

    run_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """The resolved run config (every default filled in), as written at start."""
    status: Mapped[RunStatus] = mapped_column(Enum(RunStatus, native_enum=False, length=20))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    n_starts: Mapped[int] = mapped_column(Integer, default=1)
    """How many times the run was started (1 + restarts)."""
    lease_owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    """SQLite only: the orchestrator holding the run (``host:pid:token``); a second live one is
    refused at start. None: nobody (PostgreSQL runs take any number of orchestrators)."""
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    """When ``lease_owner``'s hold on the run runs out unless its heartbeat renews it."""


class LearnerSeatRow(Base):
    """Which learner trains a run: one at a time, or two would train the same groups' versions."""

    __tablename__ = "learner_seats"

    run_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    """No foreign key: a learner may start before the orchestrator creates the run's row."""
    learner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    """The learner holding the seat (``learner@host:pid:token``); None: nobody."""
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    """When the hold runs out unless the learner claims again (each claim renews it)."""


class GroupRow(Base):
    """The G samples of one task instance; complete when every sample is done."""

    __tablename__ = "groups"

    group_id: Mapped[str] = mapped_column(String(400), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"), index=True)
    task: Mapped[str] = mapped_column(String(200))
    env_id: Mapped[str] = mapped_column(String(200))
    instance_id: Mapped[str] = mapped_column(String(400))
    size: Mapped[int] = mapped_column(Integer)
    """G, the number of samples of the instance."""
    n_done: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    """Set when ``n_done == size``; only complete groups can be claimed."""
    claimed_by: Mapped[str | None] = mapped_column(String(200), nullable=True)
    claim_token: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """Unique per claim, so that an expired claimer cannot ack a group someone else re-claimed."""
    claim_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    consumed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    """Set by ``ack``: the group reached the learner and is never handed out again."""

    __table_args__ = (
        Index("ix_groups_claimable", "completed_at", "consumed_at", "claim_expires_at"),
        Index("ix_groups_run_created", "run_id", "created_at", "group_id", "completed_at"),  # the viewer's group pages, counts
    )


class SampleRow(Base):
    """One sample slot of a group: the unit of work the scheduler admits, requeues and finishes."""

    __tablename__ = "samples"

    sample_id: Mapped[str] = mapped_column(String(420), primary_key=True)
    """``{group_id}/{sample_idx}``."""
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"))
    group_id: Mapped[str] = mapped_column(ForeignKey("groups.group_id", ondelete="CASCADE"), index=True)
    sample_idx: Mapped[int] = mapped_column(Integer)
    state: Mapped[SampleState] = mapped_column(Enum(SampleState, native_enum=False, length=20))
    n_attempts: Mapped[int] = mapped_column(Integer, default=0)
    rollout_id: Mapped[str | None] = mapped_column(String(460), nullable=True)
    """The current attempt while running; the final trajectory once done."""
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    lease_owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    """The orchestrator that claimed the sample (``host:pid:token``, see ``leases.py``) and runs
    it; None: nobody holds it."""
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    """When the owner's lease runs out unless its heartbeat renews it; after that any
    orchestrator may requeue (running) or claim (pending) the sample."""

    __table_args__ = (Index("ix_samples_run_state", "run_id", "state"),)


class TrajectoryRow(Base):
    """One rollout attempt, token-exact; arrays are little-endian numpy bytes of length T."""

    __tablename__ = "trajectories"

    rollout_id: Mapped[str] = mapped_column(String(460), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id", ondelete="CASCADE"))
    group_id: Mapped[str] = mapped_column(String(400), index=True)
    sample_id: Mapped[str | None] = mapped_column(String(420), nullable=True)
    env_id: Mapped[str] = mapped_column(String(200))
    instance_id: Mapped[str] = mapped_column(String(400))
    task: Mapped[str] = mapped_column(String(200), default="")
    token_ids: Mapped[bytes] = mapped_column(LargeBinary)
    """int32 (T,)."""
    loss_mask: Mapped[bytes] = mapped_column(LargeBinary)
    """uint8 (T,)."""
    logprobs: Mapped[bytes] = mapped_column(LargeBinary)
    """float32 (T,)."""
    versions: Mapped[bytes] = mapped_column(LargeBinary)
    """int32 (T,)."""
    n_tokens: Mapped[int] = mapped_column(Integer)
    n_generated_tokens: Mapped[int] = mapped_column(Integer)
    policy_version_min: Mapped[int] = mapped_column(Integer)
    """Oldest adapter version among generated tokens (-1 when none)."""
    policy_version_max: Mapped[int] = mapped_column(Integer)
    messages: Mapped[list[dict[str, str]]] = mapped_column(JSON)
    reward: Mapped[float] = mapped_column(Float)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[RolloutStatus] = mapped_column(Enum(RolloutStatus, native_enum=False, length=20))
    reason: Mapped[str] = mapped_column(Text, default="")
    timings: Mapped[dict[str, float]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        Index("ix_trajectories_run_created", "run_id", "created_at"),
        # The viewer's run-wide tallies (by task, status, policy version, reward) read this index only.
        Index("ix_trajectories_view", "run_id", "task", "status", "policy_version_min", "policy_version_max", "reward"),
    )
