"""Typed records that cross the packages' seams: sampling settings, generations, trajectories, groups.

Engines, the gateway, the rollout loop and the store exchange these; the learner reads
:class:`Trajectory` and :class:`ClaimedGroup` and nothing else of the orchestrator. The
staleness of a sample is defined once, by :func:`staleness`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import Field

from gymfleet.core.strict import StrictModel


class SamplingParams(StrictModel):
    """How to sample one assistant turn (unknown keys are refused, naming the nearest)."""

    temperature: float = Field(1.0, ge=0.0)
    """Softmax temperature; 0 means greedy. Logprobs are those of the distribution actually
    sampled from (logits / temperature), see the engine docstrings."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    max_new_tokens: int = Field(256, ge=1)
    """Most tokens generated in this turn."""
    stop: list[str] = Field(default_factory=list)
    """Strings that end the turn (checked on decoded text; the stop text is kept)."""
    seed: int | None = None
    """Seed for reproducible sampling: an engine seeds the request with it as given; a rollout's
    gateway session takes it as the base of each turn's seed (``gymfleet.core.sampling.turn_seed``)."""


@dataclass(frozen=True)
class Generation:
    """What an engine generated for one request.

    Attributes:
        token_ids: generated token ids, length N.
        logprobs: log-probability of each generated token under the sampling distribution, length N.
        finish_reason: "stop" (EOS or stop string), "length" (max_new_tokens) or "abort".
        adapter_version: policy version of the adapter that generated it; 0 = base model.
        replica: name of the replica that served it.
        n_prompt_tokens: prompt length in tokens.
        n_cached_tokens: prompt tokens served from the replica's KV cache (not prefilled).
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    adapter_version: int = 0
    replica: str = ""
    n_prompt_tokens: int = 0
    n_cached_tokens: int = 0


class RolloutStatus(str, enum.Enum):
    """How a rollout ended (docs/design.md, failure contract)."""

    ok = "ok"
    truncated = "truncated"
    policy_error = "policy_error"
    env_error = "env_error"
    infra_error = "infra_error"
    aborted = "aborted"

    @property
    def trains(self) -> bool:
        """Whether a trajectory with this status may reach the loss."""
        return self in {RolloutStatus.ok, RolloutStatus.truncated, RolloutStatus.policy_error}


@dataclass(frozen=True)
class Message:
    """One chat message as text, for people (the token ids are the truth)."""

    role: str
    content: str


@dataclass
class Trajectory:
    """One rollout, token-exact (docs/design.md, Trajectory).

    Arrays all have length T (prompt and every turn, exactly as the engine saw them):
    ``token_ids`` int32 (T,), ``loss_mask`` uint8 (T,) 1 on policy-generated tokens,
    ``logprobs`` float32 (T,) the behaviour policy's logprob of each generated token (0
    elsewhere), ``versions`` int32 (T,) adapter version that generated each token (-1 elsewhere).

    ``branches``: the other leaves of the same rollout's session tree (a harness that edited or
    summarised its history, docs/harness.md), each a trajectory of its own with rollout id
    ``<rollout_id>#<i>`` and ``metrics["branch_of"] = rollout_id``. They are stored beside this
    one (one row each), and trained with this sample's reward and advantage.
    """

    rollout_id: str
    run_id: str
    group_id: str
    env_id: str
    instance_id: str
    token_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    loss_mask: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    logprobs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    versions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    messages: list[Message] = field(default_factory=list)
    reward: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)
    status: RolloutStatus = RolloutStatus.ok
    reason: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    branches: list[Trajectory] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.token_ids = np.asarray(self.token_ids, dtype=np.int32)
        self.loss_mask = np.asarray(self.loss_mask, dtype=np.uint8)
        self.logprobs = np.asarray(self.logprobs, dtype=np.float32)
        self.versions = np.asarray(self.versions, dtype=np.int32)
        lengths = {len(self.token_ids), len(self.loss_mask), len(self.logprobs), len(self.versions)}
        if len(lengths) != 1:
            raise ValueError(
                f"trajectory {self.rollout_id}: token_ids, loss_mask, logprobs and versions must have "
                f"the same length, got {len(self.token_ids)}, {len(self.loss_mask)}, "
                f"{len(self.logprobs)}, {len(self.versions)}"
            )

    @property
    def n_tokens(self) -> int:
        """T, the total number of tokens."""
        return int(len(self.token_ids))

    @property
    def n_generated_tokens(self) -> int:
        """Tokens the policy generated (sum of loss_mask)."""
        return int(self.loss_mask.sum())

    @property
    def oldest_version(self) -> int:
        """The oldest policy version among generated tokens (its branches' too); -1 when none were generated."""
        generated = self.versions[self.loss_mask.astype(bool)]
        own = int(generated.min()) if len(generated) else -1
        return min([own, *(b.oldest_version for b in self.branches)], key=lambda v: (v < 0, v))


def staleness(policy_version: int, generated_version: int) -> int:
    """How many policy versions a sample lags: ``policy_version - generated_version``.

    The one definition behind every ``max_staleness`` knob: the learner drops a sample whose
    oldest generated token lags its own version by more than the bound, and the scheduler stops
    admitting rollouts while an in-flight one, started at ``generated_version``, already lags the
    newest loaded version by more than it (everything it generates would be dropped).

    Args:
        policy_version: the version now (the learner's, or the newest one the engines loaded).
        generated_version: the version that generated the sample's oldest token (or that was
            loaded when the rollout started).

    Returns:
        Versions behind, >= 0 for a version from the past.
    """
    return policy_version - generated_version


@dataclass(frozen=True)
class ClaimedGroup:
    """One complete group a learner claimed from the store: the G samples of one task instance.

    Attributes:
        group_id: the group's id (``run/task/pass/instance``).
        trajectories: the final trajectory of each of its G samples, in sample order.
        task: the task's name in the run (per-task reward in reports; empty: use the env id).
        run_id: the run it belongs to.
        env_id: the env id its samples ran in.
        instance_id: the task instance.
    """

    group_id: str
    trajectories: list[Trajectory]
    task: str = ""
    run_id: str = ""
    env_id: str = ""
    instance_id: str = ""
