"""The run report of a training job: report.json and PNG plots, from the learner's step log.

Inputs: ``learner.jsonl`` (one line per learner step, written by :mod:`gymfleet.trainer.worker`,
appended to by every start of the run) and the orchestrator side's :class:`GenerationTimeline`
(adapter loads, time generation waited). A rerun that resumes keeps the history: the steps and
rewards of every start, each resume marked on ``reward.png`` and ``learner.png``.
Outputs in the report folder: ``report.json``, ``reward.png`` (reward per task over time),
``learner.png`` (loss, masked fraction, mean ratio, KL per step), ``staleness.png`` (histogram of
sample lag in policy versions), ``idle.png`` (time the learner waited for data and time
generation waited for the learner) and, when the report has an ``evaluation`` section
(:mod:`gymfleet.run.heldout`), ``heldout.png`` (held-out pass@1 of base, warm start and final
per task family, with binomial standard-error bars).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gymfleet.run.config import BudgetConfig
from gymfleet.run.records import (
    AdapterLoad, ClusterSection, DroppedClaim, GenerationTimeline, GrpoTimes, HeldOutSection, LearnerStart,
    ReportStep, RewardPoint, TorchThreads, TrainReport, WallTime,
)
from gymfleet.run.verdict import no_learning_reason
from gymfleet.trainer import DynamicSamplingConfig, EndRow, FinalPublishRow, LogRow, StartRow, StepRow, read_log

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def run_history(rows: list[LogRow]) -> tuple[list[LearnerStart], list[ReportStep]]:
    """Every learner start of the run and every step it trained, from ``learner.jsonl``'s rows.

    The run's history begins at its last fresh learner start (``resumed`` false: an earlier
    run's rows in the same report folder are not this run's). Each step gets ``start``, the
    index of the learner start that made it. A start that resumed from a version saved before
    steps an earlier start had made (a learner killed between publishes) makes those steps
    again: the earlier rows are superseded (left out, counted in the start's ``steps_redone``).
    Claims whose groups were all dropped train nothing and are not steps (they repeated the
    previous step's number with zeros): they are returned apart by :func:`build_report`.

    Returns:
        ``(starts, steps)``, in order (``t_s`` not yet set: :func:`build_report` knows the origin).
    """
    fresh = [i for i, r in enumerate(rows) if isinstance(r, StartRow) and not r.resumed]
    rows = rows[fresh[-1]:] if fresh else rows
    starts: list[LearnerStart] = []
    steps: list[ReportStep] = []
    for r in rows:
        if isinstance(r, StartRow):
            kept = [s for s in steps if s.step <= r.step]
            starts.append(LearnerStart(len(starts), r.t, r.step, r.version, r.resumed, len(steps) - len(kept)))
            steps = kept
        elif isinstance(r, StepRow) and r.n_groups > 0:
            steps.append(ReportStep(**vars(r), start=max(len(starts) - 1, 0)))
    return starts, steps


def build_report(report_dir: Path, mode: str, timeline: GenerationTimeline, run_id: str, *,
                 stages_s: dict[str, float] | None = None, rollout_timings: list[dict[str, float]] | None = None,
                 torch_threads: TorchThreads | None = None, run_status: str = "interrupted",
                 budget: BudgetConfig | None = None, learner_exitcode: int | None = None,
                 dynamic_sampling: DynamicSamplingConfig | None = None, error: str | None = None,
                 evaluation: HeldOutSection | None = None, cluster: ClusterSection | None = None) -> TrainReport:
    """The run's report at the end of this job start: the counts, idle times and adapter loads
    of this start (its learner log rows and timeline), the ``steps``, ``reward_by_task`` and
    ``starts`` of every start of the run (:func:`run_history`), with the job's own fields
    (``run_status``, ``budget``, ``learner_exitcode``, ``evaluation``...: the rest of
    :class:`~gymfleet.run.records.TrainReport`'s fields, as their records).

    Args:
        stages_s, rollout_timings: the job's stages' seconds and the GRPO rollouts' timings, for
            ``wall_time`` (:func:`wall_time`); None: no ``wall_time``.
        torch_threads: the configured threads; ``learner`` becomes what the learner's ``start``
            row reports, when it reported.
    """
    every = read_log(report_dir)
    rows = [r for r in every if r.t >= timeline.started_at]
    steps = [r for r in rows if isinstance(r, StepRow)]
    trained = [r for r in steps if r.n_groups > 0]
    starts, history = run_history(every)
    origin = min([timeline.started_at] + [s.t for s in starts[:1]])
    staleness = Counter(lag for r in steps for lag in r.filter.staleness)
    wall = max(timeline.wall_s, 1e-9)
    learner_idle = sum(r.idle_s for r in steps) + sum(r.idle_s for r in rows if isinstance(r, EndRow))
    rewards: dict[str, list[RewardPoint]] = {}
    for step in history:
        for task, value in step.reward_by_task.items():
            rewards.setdefault(task, []).append(RewardPoint(step.t - origin, value, step.start))
    started = [r for r in rows if isinstance(r, StartRow)]
    threads = torch_threads or TorchThreads()
    if started and started[-1].torch_threads:
        threads = replace(threads, learner=started[-1].torch_threads)
    report = TrainReport(
        run_id=run_id, mode=mode, wall_s=timeline.wall_s,
        n_steps=len(trained), n_claims_all_dropped=len(steps) - len(trained),
        last_step=trained[-1].step if trained else None,
        final_version=max([r.version for r in rows if isinstance(r, (StepRow, StartRow, EndRow, FinalPublishRow))]
                          + [ld.version for ld in timeline.loads] + [0]),
        learner_idle_s=learner_idle, learner_idle_fraction=learner_idle / wall,
        generation_idle_s=timeline.generation_idle_s, generation_idle_fraction=timeline.generation_idle_s / wall,
        staleness_paused_s=timeline.staleness_paused_s,
        staleness_histogram={str(k): v for k, v in sorted(staleness.items())},
        tokens_trained=sum(r.n_tokens for r in steps),
        # groups whose rewards were all equal carry no gradient (skipped and refilled when
        # learner.dynamic_sampling is on)
        zero_variance_groups=sum(r.n_zero_variance_groups for r in steps),
        refill_extra_claims=sum(r.n_extra_claims for r in steps),
        steps_short=sum(1 for r in steps if r.n_groups_short > 0),
        tokens_masked=sum(r.masked_fraction * r.n_tokens for r in steps),
        reward_by_task=rewards,
        adapter_loads=[replace(ld, t=ld.t - timeline.started_at) for ld in timeline.loads],
        adapter_load_failures=[replace(f, t=f.t - timeline.started_at) for f in timeline.load_failures],
        served_version=max([ld.version for ld in timeline.loads] + [0]),
        tasks_left_out=dict(timeline.left_out),
        learner_device=started[-1].device if started else None,
        steps=history, starts=[replace(s, t_s=s.t - origin) for s in starts],
        dropped_claims=[DroppedClaim(r.step, r.t - origin, r.filter) for r in steps if r.n_groups == 0],
        torch_threads=threads, run_status=run_status, budget=budget, learner_exitcode=learner_exitcode,
        dynamic_sampling=dynamic_sampling, error=error, evaluation=evaluation, cluster=cluster)
    if stages_s is not None:
        report.wall_time = wall_time(stages_s, rollout_timings or [], trained, report.adapter_loads)
    report.no_learning = no_learning_reason(report)
    return report


def wall_time(stages_s: dict[str, float], timings: list[dict[str, float]], steps: list[StepRow],
              loads: list[AdapterLoad]) -> WallTime:
    """Where a run's wall time went: the job's stages, and inside GRPO the seconds each side spent.

    Args:
        stages_s: seconds per stage of the job (``warm_start``, ``grpo``, ``heldout``), wall clock.
        timings: the GRPO rollouts' ``Trajectory.timings`` (``generation_s``, ``env_s``, ``reset_s``,
            ``close_s``; :class:`~gymfleet.orchestrator.rollout.Rollout`).
        steps: this start's learner steps that trained; loads: its adapter loads.

    Returns:
        ``stages_s`` (and their ``total``), and ``grpo``: the rollouts' summed ``generation_s``
        (waiting on the engines, batching included), ``env_s`` (steps and grading), ``reset_s``
        and ``close_s`` (sandbox or page set-up and release); the learner's summed step
        ``duration_s`` and ``idle_s``; the adapter loads' summed ``load_s``. Rollouts overlap
        (``max_in_flight``) and the learner runs in its own process, so the sums of one side can
        exceed the stage's wall time; ``rollouts`` is how many were summed.
    """
    def total(key: str) -> float:
        return round(sum(float(t.get(key, 0.0)) for t in timings), 1)

    return WallTime(
        stages_s={k: round(v, 1) for k, v in stages_s.items()} | {"total": round(sum(stages_s.values()), 1)},
        grpo=GrpoTimes(
            rollouts=len(timings), generation_s=total("generation_s"), env_s=total("env_s"),
            reset_s=total("reset_s"), close_s=total("close_s"),
            learner_step_s=round(sum(r.duration_s for r in steps), 1),
            learner_idle_s=round(sum(r.idle_s for r in steps), 1),
            adapter_load_s=round(sum(ld.load_s for ld in loads), 1)))


def write_report(report_dir: Path, report: TrainReport) -> Path:
    """Writes report.json (:meth:`TrainReport.to_dict`, the one serialisation) and the PNGs;
    returns the path of report.json."""
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / "report.json"
    path.write_text(json.dumps(report.to_dict(), indent=2, default=str))
    _plots(report_dir, report)
    return path


def _plots(report_dir: Path, report: TrainReport) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    resumes = [s for s in report.starts if s.start > 0]
    fig, ax = plt.subplots(figsize=(7, 4))
    for task, pts in report.reward_by_task.items():
        ax.plot([p.t_s for p in pts], [p.reward for p in pts], marker="o", label=task)
    for s in resumes:
        ax.axvline(s.t_s, color="grey", linestyle="--", linewidth=1)
        ax.annotate(f"resumed (v{s.version})", (s.t_s, 1.0), xycoords=("data", "axes fraction"),
                    fontsize=7, rotation=90, va="top", ha="right", color="grey")
    ax.set(xlabel="seconds since the run's first start", ylabel="mean reward of the step's samples",
           title=f"{report.run_id} ({report.mode}): reward per task")
    if report.reward_by_task:
        ax.legend()
    _save(fig, report_dir / "reward.png")

    steps = report.steps
    fig, axes = plt.subplots(2, 2, figsize=(9, 6))
    for ax, key in zip(axes.flat, ("loss", "masked_fraction", "mean_ratio", "kl")):
        for start in sorted({s.start for s in steps}):
            mine = [s for s in steps if s.start == start]
            ax.plot([s.step for s in mine], [getattr(s, key) for s in mine], marker=".", label=f"starts[{start}]")
        for s in resumes:
            ax.axvline(s.step + 0.5, color="grey", linestyle="--", linewidth=1)
        ax.set(xlabel="learner step", title=key)
    if resumes:
        axes.flat[0].legend(fontsize=7, title="dashed: resumed", title_fontsize=7)
    _save(fig, report_dir / "learner.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    hist = report.staleness_histogram
    ax.bar(list(hist), list(hist.values()))
    ax.set(xlabel="policy versions behind the learner", ylabel="samples trained", title="staleness")
    _save(fig, report_dir / "staleness.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(["learner waiting for data", "generation waiting for learner"],
           [report.learner_idle_s, report.generation_idle_s])
    ax.set(ylabel="seconds", title=f"idle time of {report.wall_s:.0f} s ({report.mode})")
    _save(fig, report_dir / "idle.png")
    if report.evaluation is not None:
        _heldout_plot(report_dir, report.run_id, report.evaluation)


POLICY_ORDER = ("base", "warm_start", "final")


def _heldout_plot(report_dir: Path, run_id: str, evaluation: HeldOutSection) -> None:
    """``heldout.png``: pass@1 per family, one bar per policy side by side, ± 1 SE; under each family its
    gains (warm start vs base, final vs warm start) in standard errors of the difference."""
    import matplotlib.pyplot as plt

    by_family = evaluation.by_family
    families = list(by_family)
    policies = [p for p in POLICY_ORDER if any(p in by_family[f] for f in families)]
    width = 0.8 / max(len(policies), 1)
    fig, ax = plt.subplots(figsize=(max(6, 3.6 * len(families) + 2), 4.5))
    for i, policy in enumerate(policies):
        scores = [by_family[f].get(policy) for f in families]
        bars = ax.bar([k + (i - (len(policies) - 1) / 2) * width for k in range(len(families))],
                      [s.pass_at_1 if s else 0.0 for s in scores], width,
                      yerr=[s.se if s else 0.0 for s in scores], capsize=3, label=policy)
        ax.bar_label(bars, labels=[f"{s.pass_at_1:.2f}" if s else "" for s in scores], fontsize=8)
    ns = {f: max((s.n for s in by_family[f].values()), default=0) for f in families}
    ax.set_xticks(range(len(families)), [f"{f}\n(n={ns[f]})" + "".join(
        f"\n{name.replace('_vs_', ' vs ').replace('_start', '')}: {g.delta:+.2f} ({g.in_se()})"
        for name, g in evaluation.gains.get(f, {}).items() if name != "final_vs_base") for f in families])
    ax.set(ylim=(0, 1.1), ylabel=f"pass@1 (reward >= {evaluation.threshold:g}) ± SE",
           title=f"{run_id}: held-out pass@1")
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    _save(fig, report_dir / "heldout.png")


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    import matplotlib.pyplot as plt

    plt.close(fig)
