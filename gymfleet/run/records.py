"""The run's records: adapter loads, the generation timeline, held-out scores and gains, the report.

Every module of ``gymfleet.run`` that writes or reads one of these imports it from here, and this
module imports nothing of the run layer but :mod:`gymfleet.run.verdict` (which reads only the
report's dict): it is what keeps the run layer free of import circles (collection -> follow ->
report -> heldout -> evaluate -> collection went round before).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gymfleet.run.verdict import no_learning_reason


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


OPTIONAL_SECTIONS = ("error", "evaluation", "cluster")
"""Report sections left out of report.json when they are None (as before the record existed)."""


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
        staleness_histogram: samples trained, per policy versions behind the learner.
        tokens_trained, tokens_masked: tokens in the steps' batches, and those masked out.
        zero_variance_groups, refill_extra_claims, steps_short: dynamic sampling's counts.
        reward_by_task: per task, ``[{t_s, reward, start}]`` per learner step, of every start of
            the run (``t_s`` since the run's first start).
        adapter_loads, adapter_load_failures, served_version: the hot-loads (``t`` relative).
        tasks_left_out: tasks this machine could not run, and why.
        learner_device: where the learner trained (None: it never started).
        steps: one row per learner step that trained, of every start of the run
            (learner.jsonl's, trimmed; ``start``: which start made it; steps a resumed start
            made again replace the lost ones).
        starts: each learner start of the run: ``{start, t, t_s, step, version, resumed,
            steps_redone}`` (:func:`gymfleet.run.report.run_history`).
        dropped_claims: this start's claims whose groups were all dropped (nothing trained):
            ``{after_step, t_s, filter}``.
        run_status: the run's status, a :class:`~gymfleet.orchestrator.store.schema.RunStatus`
            value (``completed (budget)``, ``interrupted``, ``failed``...), on a cluster too.
        budget: the budget section of the config.
        learner_exitcode: 0 when the learner spent its budget; None on a cluster (Ray restarts it).
        dynamic_sampling: the learner's dynamic-sampling settings.
        torch_threads: ``{cpus, learner, engines}``: usable CPUs, the learner's and each
            in-process engine's torch threads.
        wall_time: where the wall time went (:func:`gymfleet.run.report.wall_time`).
        error: why the run stopped, when it failed (absent from report.json otherwise).
        evaluation: the held-out section (:meth:`gymfleet.run.heldout.HeldOutEvaluation.as_dict`).
        cluster: what each Ray role did (``train --cluster`` only).
    """

    run_id: str
    mode: str
    wall_s: float
    n_steps: int
    n_claims_all_dropped: int
    last_step: int | None
    final_version: int
    learner_idle_s: float
    learner_idle_fraction: float
    generation_idle_s: float
    generation_idle_fraction: float
    staleness_paused_s: float
    staleness_histogram: dict[str, int]
    tokens_trained: int
    zero_variance_groups: int
    refill_extra_claims: int
    steps_short: int
    tokens_masked: float
    reward_by_task: dict[str, list[dict[str, float]]]
    adapter_loads: list[dict[str, float]]
    adapter_load_failures: list[dict[str, Any]]
    served_version: int
    tasks_left_out: dict[str, str]
    learner_device: str | None
    steps: list[dict[str, Any]]
    starts: list[dict[str, Any]] = field(default_factory=list)
    dropped_claims: list[dict[str, Any]] = field(default_factory=list)
    run_status: str = "interrupted"
    budget: dict[str, Any] = field(default_factory=dict)
    learner_exitcode: int | None = None
    dynamic_sampling: dict[str, Any] = field(default_factory=dict)
    torch_threads: dict[str, Any] = field(default_factory=dict)
    wall_time: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    evaluation: dict[str, Any] | None = None
    cluster: dict[str, Any] | None = None

    @property
    def no_learning(self) -> str | None:
        """Why this start made no learner step (:func:`gymfleet.run.verdict.no_learning_reason`)."""
        return no_learning_reason(self._fields())

    def _fields(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not (k in OPTIONAL_SECTIONS and v is None)}

    def to_dict(self) -> dict[str, Any]:
        """report.json's content: every field, ``no_learning`` last; ``error``, ``evaluation`` and
        ``cluster`` only when set."""
        out = self._fields()
        return out | {"no_learning": no_learning_reason(out)}
