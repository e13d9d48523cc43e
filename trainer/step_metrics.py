"""StepMetrics: what one learner step did (a :class:`~gymfleet.trainer.step_log.StepRow` of ``learner.jsonl``),
and GroupFilterStats: what the step's group repair threw away. No torch here: the log's readers load it.

Field names are plain and each documented under it (docs/train.md lists them); ``kl`` is the
off-policy KL of the behaviour policy to the learner, ``kl_ref`` the KL to the reference policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GroupFilterStats:
    """What :func:`repair_groups` threw away, for the run report."""

    groups_in: int = 0
    groups_dropped: int = 0
    samples_not_trainable: int = 0
    samples_stale: int = 0
    samples_padded: int = 0
    staleness: list[int] = field(default_factory=list)
    """Learner version minus oldest token version, per kept sample (for the histogram)."""


@dataclass
class StepMetrics:
    """What one learner step did (one row of the run report)."""

    step: int
    loss: float
    masked_fraction: float
    mean_ratio: float
    kl: float
    n_tokens: int
    n_groups: int
    mean_reward: float
    filter: GroupFilterStats = field(default_factory=GroupFilterStats)
    duration_s: float = 0.0
    published_version: int | None = None
    reward_by_task: dict[str, float] = field(default_factory=dict)
    """Mean reward of the trainable samples claimed this step, per task."""
    n_zero_variance_groups: int = 0
    """Groups claimed this step whose rewards were all equal (no gradient); with dynamic sampling
    they were acknowledged untrained."""
    n_extra_claims: int = 0
    """Claims beyond the step's first that returned groups (the refill)."""
    n_groups_short: int = 0
    """Groups with variance the step lacked when the refill gave up (0: a full step)."""
    grad_norm: float = 0.0
    """Norm of the step's whole gradient before clipping to ``max_grad_norm`` (all ranks summed)."""
    learning_rate: float = 0.0
    """Learning rate of this step's update (the schedule's value)."""
    entropy: float = 0.0
    """Mean entropy (nats) of the learner's sampling distribution (the rollouts' temperature and
    top-p) over the generated tokens."""
    kl_ref: float | None = None
    """Mean per-token KL to the reference (the base model), k3 estimator; None when
    ``kl_coef`` is 0 (no reference pass)."""
    world_size: int = 1
    """Data-parallel ranks that trained the step."""

