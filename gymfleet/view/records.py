"""The viewer's records: what its queries return and its JSON API sends (typed, never loose dicts).

:func:`to_json` is the one serialisation (datetimes as ISO 8601 UTC, dataclasses as objects).
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime
from typing import Any

from pydantic import Field

from gymfleet.core.records import RolloutStatus
from gymfleet.core.strict import StrictModel
from gymfleet.view.errors import ViewError

ADVANTAGE_EPS = 1e-6
"""The learner's epsilon (``gymfleet.trainer``'s ``group_advantages``; GRPO, Shao et al. 2024, sec. 4.1.2)."""


def group_advantages(rewards: list[float | None]) -> list[float | None]:
    """GRPO advantages of one group, ``A_i = (r_i - mean(r)) / (std(r) + 1e-6)`` with the population
    std, as the learner computes them (``trainer/loss.py``, ``group_advantages``; Shao et al.
    2024, DeepSeekMath, sec. 4.1.2), over the samples that train (None in, None out).

    Args:
        rewards: one per sample, None for a sample that never reaches the loss.

    Returns:
        One advantage per sample (None where the reward was None).
    """
    valid = [r for r in rewards if r is not None]
    if not valid:
        return [None for _ in rewards]
    mean = sum(valid) / len(valid)
    std = math.sqrt(sum((r - mean) ** 2 for r in valid) / len(valid))
    return [None if r is None else (r - mean) / (std + ADVANTAGE_EPS) for r in rewards]


@dataclass(frozen=True)
class Cursor:
    """A position in a newest-first list: the ``created_at`` and id of the last row seen."""

    created_at: datetime
    id: str

    def encode(self) -> str:
        """The cursor as an opaque URL-safe token."""
        raw = f"{self.created_at.isoformat()}\n{self.id}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> Cursor:
        """The inverse of :meth:`encode`.

        Raises:
            ViewError: a token that no page handed out.
        """
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
            when, row_id = raw.split("\n", 1)
            return cls(datetime.fromisoformat(when), row_id)
        except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
            raise ViewError(f"bad page cursor {token[:40]!r}: follow the page's own links") from exc


class TrajectoryFilters(StrictModel):
    """What a trajectory list keeps (all optional; together they all apply)."""

    task: str | None = None
    """The task's name in the run config."""
    status: RolloutStatus | None = None
    """One rollout status."""
    min_reward: float | None = None
    """Rewards at least this."""
    max_reward: float | None = None
    """Rewards at most this."""
    version: int | None = Field(default=None, ge=-1)
    """A policy version that generated some of the rollout's tokens."""
    text: str | None = Field(default=None, max_length=200)
    """Text in the rollout's actions or observations (case-insensitive substring)."""


@dataclass(frozen=True)
class RunRowView:
    """A run at a glance (the runs page)."""

    run_id: str
    status: str
    created_at: datetime
    updated_at: datetime
    n_starts: int
    wall_s: float
    """From the run's first start to its last update, seconds."""
    by_status: dict[str, int]
    mean_reward: float | None
    """Over ok and truncated rollouts."""
    n_groups: int
    n_groups_complete: int
    n_in_flight: int
    """Samples some orchestrator is running now."""
    max_steps: int | None = None


@dataclass(frozen=True)
class RewardPoint:
    """Mean reward of one task's scored rollouts whose newest token came from one policy version."""

    task: str
    version: int
    n: int
    mean_reward: float


@dataclass(frozen=True)
class RunOverview:
    """The run page's numbers (learner steps and report files are added from the run's folder)."""

    run: RunRowView
    config: dict[str, Any]
    tasks: list[str]
    rewards: list[RewardPoint]
    newest_version: int
    """The newest policy version any stored token came from (-1: none yet)."""
    version_lag: dict[int, int]
    """Rollouts by how many versions their oldest token lags ``newest_version``."""
    in_flight_by_task: dict[str, int]


@dataclass(frozen=True)
class TrajectoryRowView:
    """One trajectory in a list: no arrays, no messages."""

    rollout_id: str
    group_id: str
    sample_id: str | None
    task: str
    env_id: str
    instance_id: str
    status: str
    reward: float
    n_tokens: int
    n_generated_tokens: int
    policy_version_min: int
    policy_version_max: int
    reason: str
    created_at: datetime
    cursor: str

    @property
    def trains(self) -> bool:
        """Whether its status may reach the loss (``RolloutStatus.trains``)."""
        return RolloutStatus(self.status).trains

    @classmethod
    def from_row(cls, r: Any) -> TrajectoryRowView:
        """From a row carrying the list columns (``queries.LIST_COLUMNS``)."""
        return cls(rollout_id=r.rollout_id, group_id=r.group_id, sample_id=r.sample_id, task=r.task,
                   env_id=r.env_id, instance_id=r.instance_id, status=RolloutStatus(r.status).value,
                   reward=float(r.reward), n_tokens=r.n_tokens, n_generated_tokens=r.n_generated_tokens,
                   policy_version_min=r.policy_version_min, policy_version_max=r.policy_version_max,
                   reason=(r.reason or "")[:300], created_at=r.created_at,
                   cursor=Cursor(r.created_at, r.rollout_id).encode())


@dataclass(frozen=True)
class SampleView:
    """One sample of a group: its trajectory and its GRPO advantage (None: never trained)."""

    trajectory: TrajectoryRowView
    advantage: float | None


@dataclass(frozen=True)
class GroupSummary:
    """One group: the G samples of one task instance."""

    group_id: str
    task: str
    env_id: str
    instance_id: str
    size: int
    n_done: int
    created_at: datetime
    completed_at: datetime | None
    consumed: bool
    """The learner trained on it (acknowledged)."""
    samples: list[SampleView] = field(default_factory=list)

    @property
    def cursor(self) -> str:
        return Cursor(self.created_at, self.group_id).encode()


@dataclass(frozen=True)
class TrajectoryDetail:
    """One trajectory, token-exact: arrays of length T."""

    summary: TrajectoryRowView
    messages: list[dict[str, str]]
    metrics: dict[str, Any]
    timings: dict[str, Any]
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    versions: list[int]


def to_json(value: Any) -> Any:
    """``value`` (records, containers, datetimes) as JSON-ready Python values."""
    if is_dataclass(value) and not isinstance(value, type):
        out = {f.name: to_json(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, GroupSummary):
            out["cursor"] = value.cursor
        return out
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
