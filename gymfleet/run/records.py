"""The run's records: adapter loads, the generation timeline, held-out scores and gains, the report.

Every module of ``gymfleet.run`` that writes or reads one of these imports it from here, and this
module imports nothing of the run layer but the config's models: it is what keeps the run layer
free of import circles (collection -> follow -> report -> heldout -> evaluate -> collection went
round before). :class:`TrainReport` is typed to its leaves; :meth:`TrainReport.to_dict` and
:meth:`TrainReport.from_dict` (pydantic's ``TypeAdapter`` over these dataclasses) are its one
JSON boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from pydantic import TypeAdapter

from gymfleet.run.config import BudgetConfig
from gymfleet.trainer import DynamicSamplingConfig, EndRow, GroupFilterStats, StepRow


@dataclass
class AdapterLoad:
    """One adapter version hot-loaded into the engines.

    Attributes:
        t: wall-clock time of the load (``time.time()``; in report.json, seconds since the start).
        version: the adapter version loaded.
        load_s: seconds the (last) try took.
    """

    t: float
    version: int
    load_s: float


@dataclass
class AdapterLoadFailure:
    """An adapter version no engine took after every try: skipped, the previous one kept."""

    t: float
    version: int
    attempts: int
    error: str


@dataclass
class GenerationTimeline:
    """What the orchestrator side measured during a training job.

    Attributes:
        started_at: wall-clock start (``time.time()``).
        wall_s: seconds the job ran.
        generation_idle_s: seconds with no rollout in flight (waiting for the learner or the gate).
        staleness_paused_s: seconds the staleness gate held admission closed.
        loads: adapter versions hot-loaded.
        load_failures: adapter versions skipped because every try to load them failed.
        left_out: tasks left out because their service is missing, with why.
    """

    started_at: float
    wall_s: float = 0.0
    generation_idle_s: float = 0.0
    staleness_paused_s: float = 0.0
    loads: list[AdapterLoad] = field(default_factory=list)
    load_failures: list[AdapterLoadFailure] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)


def binomial_se(p: float, n: int) -> float:
    """Standard error of a pass rate ``p`` measured on ``n`` independent rollouts.

    ``sqrt(p (1 - p) / n)``: the binomial standard error of a proportion, i.e. the standard
    error of the mean of Bernoulli scores (normal approximation; E. Miller 2024, "Adding Error
    Bars to Evals", arXiv:2411.00640, section 2). It is 0 at p = 0 or 1, and NaN for n = 0.
    """
    if n <= 0:
        return math.nan
    return math.sqrt(p * (1.0 - p) / n)


@dataclass(frozen=True)
class PassRate:
    """One policy's score on one task family's held-out instances.

    Attributes:
        pass_at_1: fraction of rollouts whose reward is >= the threshold.
        n: rollouts scored (infrastructure failures excluded).
        se: binomial standard error of ``pass_at_1`` (:func:`binomial_se`).
        mean_reward: mean reward of the ``n`` rollouts.
        n_passed: rollouts that passed.
    """

    pass_at_1: float
    n: int
    se: float
    mean_reward: float
    n_passed: int

    @classmethod
    def from_rewards(cls, rewards: list[float], threshold: float) -> PassRate:
        """Scores ``rewards``; an empty list gives n = 0 and NaN rates."""
        n = len(rewards)
        passed = sum(r >= threshold for r in rewards)
        p = passed / n if n else math.nan
        return cls(p, n, binomial_se(p, n), sum(rewards) / n if n else math.nan, passed)

    def describe(self) -> str:
        """``0.250 ± 0.153 (n=8)``."""
        return f"{self.pass_at_1:.3f} ± {self.se:.3f} (n={self.n})"


@dataclass(frozen=True)
class Gain:
    """How much one policy's pass@1 exceeds another's on one family, in standard errors.

    Attributes:
        delta: ``p_after - p_before`` (pass@1 points, in [-1, 1]).
        se: the standard error of ``delta``, ``sqrt(se_after^2 + se_before^2)``: the two scores
            treated as independent samples (Miller 2024, arXiv:2411.00640, section 4, the
            unpaired comparison). The rollouts share instances and seeds, so this ignores how
            much the policies agree on which instances are hard; see ``se_paired``.
        z: ``delta / se``; None when both scores have se 0 (each is 0 or 1: the difference is
            exact), so that ``report.json`` stays strict JSON (no ``Infinity``).
        meets: ``z >= 2``: the gain is at least two standard errors (with z None: ``delta > 0``).
        n_paired: rollouts both policies finished (same rollout id: same instance, sample and
            seed); 0 when the outcomes were not given.
        se_paired: the paired standard error, ``sd(d) / sqrt(n_paired)`` over the per-rollout
            differences ``d = passed_after - passed_before`` (sample sd; Miller 2024, section 4,
            paired differences): it removes the variance the policies share per instance, the
            analysis this paired design allows; smaller than ``se`` when the policies tend to
            pass and fail the same rollouts. None without pairs.
        z_paired: ``mean(d) / se_paired``; None when ``se_paired`` is 0 or None.
        meets_paired: ``z_paired >= 2`` (with se_paired 0: ``mean(d) > 0``); None without pairs.
    """

    delta: float
    se: float
    z: float | None
    meets: bool
    n_paired: int = 0
    se_paired: float | None = None
    z_paired: float | None = None
    meets_paired: bool | None = None

    @classmethod
    def between(cls, after: PassRate, before: PassRate,
                paired: tuple[dict[str, bool], dict[str, bool]] | None = None) -> Gain:
        """``after``'s gain over ``before``; ``paired``: both policies' pass/fail by rollout id."""
        delta = after.pass_at_1 - before.pass_at_1
        se = math.sqrt(after.se ** 2 + before.se ** 2)
        z = delta / se if se > 0 else None
        gain = cls(delta, se, z, z >= 2.0 if z is not None else delta > 0)
        if paired is None:
            return gain
        a, b = paired
        diffs = [float(a[k]) - float(b[k]) for k in sorted(set(a) & set(b))]
        if len(diffs) < 2:
            return gain
        mean = sum(diffs) / len(diffs)
        se_p = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1) / len(diffs))
        z_p = mean / se_p if se_p > 0 else None
        return replace(gain, n_paired=len(diffs), se_paired=se_p, z_paired=z_p,
                       meets_paired=z_p >= 2.0 if z_p is not None else mean > 0)

    def describe(self) -> str:
        """``+0.188 ± 0.069 (2.7 SE)``, or ``+0.167 ± 0.087 (1.9 SE; paired 2.1 SE)`` with pairs."""
        return f"{self.delta:+.3f} ± {self.se:.3f} ({self.in_se()})"

    def in_se(self) -> str:
        """``1.9 SE; paired 2.1 SE`` (``exact`` for a z that is None)."""
        return z_text(self.z) + (f"; paired {z_text(self.z_paired)}" if self.n_paired else "")


def gains_text(gains: dict[str, Gain]) -> str:
    """``; warm start vs base +0.667 ± 0.068 (9.8 SE); final vs warm start ...``: the gains of one
    family as a summary line ends (``final_vs_base`` left out: the scores beside it show it)."""
    return "".join(f"; {name.replace('_vs_', ' vs ').replace('_', ' ')} {gain.describe()}"
                   for name, gain in gains.items() if name != "final_vs_base")


def z_text(z: float | None) -> str:
    """``2.7 SE``, or ``exact`` for a gain between two scores of se 0 (:attr:`Gain.z` None)."""
    return "exact" if z is None else f"{z:.1f} SE"


@dataclass(frozen=True)
class PolicySource:
    """A policy to evaluate: ``adapter`` is a PEFT folder (None: the base model)."""

    name: str
    adapter: str | None = None
    version: int | None = None


@dataclass
class HeldOutSection:
    """The report's ``evaluation`` section (:meth:`gymfleet.run.heldout.HeldOutEvaluation.section`).

    Attributes:
        metric: how pass@1 and its standard error are computed, in words.
        threshold, samples_per_instance, seed: as the evaluation ran.
        instances: held-out instance ids per family.
        policies: what was evaluated.
        by_family: ``by_family[family][policy]``: the pass rate.
        gains: ``gains[family]["final_vs_warm_start"]``: the comparisons both scores exist for.
        errors: families that could not be evaluated, with why.
    """

    metric: str
    threshold: float
    samples_per_instance: int
    seed: int
    instances: dict[str, list[str]]
    policies: list[PolicySource] = field(default_factory=list)
    by_family: dict[str, dict[str, PassRate]] = field(default_factory=dict)
    gains: dict[str, dict[str, Gain]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


@dataclass
class RewardPoint:
    """One learner step's mean reward of one task: ``t_s`` since the run's first start, and the
    learner start that made the step."""

    t_s: float
    reward: float
    start: int


@dataclass
class ReportStep(StepRow):
    """A learner step of the run (``learner.jsonl``'s row) and ``start``, the learner start that made it."""

    start: int = 0


@dataclass
class LearnerStart:
    """One learner start of the run (:func:`gymfleet.run.report.run_history`).

    Attributes:
        start: its index; t: wall-clock time; t_s: seconds since the run's first start.
        step, version: where it resumed from; resumed: False for the run's first start.
        steps_redone: steps an earlier start made that this one made again (lost with the
            version they were not published in).
    """

    start: int
    t: float
    step: int
    version: int
    resumed: bool
    steps_redone: int
    t_s: float = 0.0


@dataclass
class DroppedClaim:
    """A claim whose groups were all dropped (too stale or too long): nothing was trained."""

    after_step: int
    t_s: float
    filter: GroupFilterStats


@dataclass
class TorchThreads:
    """Usable CPUs, the learner's torch threads and each in-process engine's (by engine name)."""

    cpus: int = 0
    learner: int | None = None
    engines: dict[str, int | None] = field(default_factory=dict)


@dataclass
class GrpoTimes:
    """Inside the GRPO stage, the seconds each side spent (summed over overlapping work; see
    :func:`gymfleet.run.report.wall_time`)."""

    rollouts: int = 0
    generation_s: float = 0.0
    env_s: float = 0.0
    reset_s: float = 0.0
    close_s: float = 0.0
    learner_step_s: float = 0.0
    learner_idle_s: float = 0.0
    adapter_load_s: float = 0.0


@dataclass
class WallTime:
    """Where a run's wall time went: seconds per stage (and ``total``), and inside GRPO."""

    stages_s: dict[str, float] = field(default_factory=dict)
    grpo: GrpoTimes = field(default_factory=GrpoTimes)


@dataclass
class ShardResult:
    """What one orchestrator shard did (this start; ``train --cluster``)."""

    index: int
    status: str
    completed: int
    by_status: dict[str, int]
    loads: list[AdapterLoad]


@dataclass
class ReplicaStats:
    """What one replica actor did since its (re)start: tokens generated, forward passes, the
    adapters it holds (names)."""

    url: str
    generated_tokens: int
    forward_passes: int
    adapters: list[str]


@dataclass
class ClusterSection:
    """What each Ray role did (``train --cluster``): the cluster's address and hosts, each shard,
    the learner's last ``end`` row, sandboxes swept per node id, each replica, and where each
    stage around GRPO ran (``warm_start``, ``heldout_base``, ``heldout``: ``ray::StageRole pid N on
    node ID``)."""

    address: str
    hosts: list[str]
    shards: list[ShardResult] = field(default_factory=list)
    learner_end: EndRow | None = None
    sandboxes_swept: dict[str, int] = field(default_factory=dict)
    replicas: list[ReplicaStats] = field(default_factory=list)
    stages: dict[str, str] = field(default_factory=dict)


OPTIONAL_SECTIONS = ("error", "evaluation", "cluster")
"""Report sections left out of report.json when they are None."""


@dataclass
class TrainReport:
    """What a training run did, as of the end of its latest job start: ``report.json``, built once
    at the job's end (:func:`gymfleet.run.report.build_report`) and serialised once (:meth:`to_dict`).

    Counts, idle times and adapter loads are this start's (its rows of ``learner.jsonl``, the
    orchestrator's :class:`GenerationTimeline`; ``adapter_loads[].t`` in seconds since it began);
    ``steps``, ``reward_by_task`` and ``starts`` cover every start of the run.
    Each key is described in docs/train.md (Report).

    Attributes:
        run_id, mode: the run and ``async``/``sync``.
        wall_s: seconds the GRPO stage ran.
        n_steps: learner steps that trained groups; ``n_claims_all_dropped``: claims whose
            groups were all dropped (too stale or too long).
        last_step, final_version: the learner's last step, the newest version published or loaded.
        learner_idle_s / _fraction, generation_idle_s / _fraction: seconds (and fraction of
            ``wall_s``) the learner waited for data, and generation had nothing in flight.
        staleness_paused_s: seconds the staleness gate held admission closed.
        staleness_histogram: samples trained, per policy versions behind the learner (the key).
        tokens_trained, tokens_masked: tokens in the steps' batches, and those masked out.
        zero_variance_groups, refill_extra_claims, steps_short: dynamic sampling's counts.
        reward_by_task: per task, a point per learner step, of every start of the run.
        adapter_loads, adapter_load_failures, served_version: the hot-loads (``t`` relative).
        tasks_left_out: tasks this machine could not run, and why.
        learner_device: where the learner trained (None: it never started).
        steps: every learner step that trained, of every start of the run (steps a resumed
            start made again replace the lost ones).
        starts: each learner start of the run.
        dropped_claims: this start's claims whose groups were all dropped (nothing trained).
        run_status: the run's status, a ``RunStatus`` value (``completed (budget)``,
            ``interrupted``, ``failed``...), on a cluster too.
        budget: the config's budget.
        learner_exitcode: 0 when the learner spent its budget; None on a cluster (Ray restarts it).
        dynamic_sampling: the learner's dynamic-sampling settings.
        torch_threads: usable CPUs, the learner's and each in-process engine's torch threads.
        wall_time: where the wall time went (:func:`gymfleet.run.report.wall_time`).
        error: why the run stopped, when it failed (absent from report.json otherwise).
        evaluation: the held-out section.
        cluster: what each Ray role did (``train --cluster`` only).
        no_learning: why this start made no learner step, in one line (None when it made one;
            :func:`gymfleet.run.verdict.no_learning_reason`, set by the report's builder).
    """

    run_id: str
    mode: str
    wall_s: float = 0.0
    n_steps: int = 0
    n_claims_all_dropped: int = 0
    last_step: int | None = None
    final_version: int = 0
    learner_idle_s: float = 0.0
    learner_idle_fraction: float = 0.0
    generation_idle_s: float = 0.0
    generation_idle_fraction: float = 0.0
    staleness_paused_s: float = 0.0
    staleness_histogram: dict[str, int] = field(default_factory=dict)
    tokens_trained: int = 0
    zero_variance_groups: int = 0
    refill_extra_claims: int = 0
    steps_short: int = 0
    tokens_masked: float = 0.0
    reward_by_task: dict[str, list[RewardPoint]] = field(default_factory=dict)
    adapter_loads: list[AdapterLoad] = field(default_factory=list)
    adapter_load_failures: list[AdapterLoadFailure] = field(default_factory=list)
    served_version: int = 0
    tasks_left_out: dict[str, str] = field(default_factory=dict)
    learner_device: str | None = None
    steps: list[ReportStep] = field(default_factory=list)
    starts: list[LearnerStart] = field(default_factory=list)
    dropped_claims: list[DroppedClaim] = field(default_factory=list)
    run_status: str = "interrupted"
    budget: BudgetConfig | None = None
    learner_exitcode: int | None = None
    dynamic_sampling: DynamicSamplingConfig | None = None
    torch_threads: TorchThreads = field(default_factory=TorchThreads)
    wall_time: WallTime = field(default_factory=WallTime)
    error: str | None = None
    evaluation: HeldOutSection | None = None
    cluster: ClusterSection | None = None
    no_learning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """report.json's content: every field, ``no_learning`` last; ``error``, ``evaluation`` and
        ``cluster`` only when set (NaN pass rates stay floats, written as ``NaN``)."""
        out = _adapter().dump_python(self)
        reason = out.pop("no_learning")
        return {k: v for k, v in out.items() if not (k in OPTIONAL_SECTIONS and v is None)} | {"no_learning": reason}

    @classmethod
    def from_dict(cls, content: dict[str, Any]) -> TrainReport:
        """The report :meth:`to_dict` gave (report.json read back).

        Raises:
            pydantic.ValidationError: ``content`` is not a report.
        """
        return _adapter().validate_python(content)


@cache
def _adapter() -> TypeAdapter[TrainReport]:
    return TypeAdapter(TrainReport)
