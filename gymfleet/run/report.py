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
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gymfleet.run.records import Gain, GenerationTimeline, TrainReport
from gymfleet.trainer import STEPS_FILE


def read_steps(report_dir: Path) -> list[dict[str, Any]]:
    """Every line of ``learner.jsonl`` (events start, step, final_publish, end)."""
    path = Path(report_dir) / STEPS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def last_event(report_dir: Path, event: str) -> dict[str, Any]:
    """The newest ``event`` row of ``learner.jsonl`` ({} when there is none)."""
    return next((r for r in reversed(read_steps(report_dir)) if r["event"] == event), {})


STEP_KEYS = ("step", "t", "loss", "masked_fraction", "mean_ratio", "kl", "n_tokens", "n_groups", "mean_reward",
             "idle_s", "duration_s", "published_version", "reward_by_task", "version")
"""The keys of a ``learner.jsonl`` step row the report's ``steps`` keeps."""


def run_history(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every learner start of the run and every step it trained, from ``learner.jsonl``'s rows.

    The run's history begins at its last fresh learner start (``resumed`` false: an earlier
    run's rows in the same report folder are not this run's). Each step row gets ``start``, the
    index of the learner start that made it. A start that resumed from a version saved before
    steps an earlier start had made (a learner killed between publishes) makes those steps
    again: the earlier rows are superseded (left out, counted in the start's ``steps_redone``).
    Claims whose groups were all dropped train nothing and are not steps (they repeated the
    previous step's number with zeros): they are returned apart by :func:`build_report`.

    Returns:
        ``(starts, steps)``: ``starts`` as ``{start, t, step, version, resumed, steps_redone}``,
        ``steps`` the trained step rows in order.
    """
    fresh = [i for i, r in enumerate(rows) if r["event"] == "start" and not r.get("resumed")]
    rows = rows[fresh[-1]:] if fresh else rows
    starts: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    for r in rows:
        if r["event"] == "start":
            kept = [s for s in steps if s["step"] <= r.get("step", 0)]
            starts.append({"start": len(starts), "t": r["t"], "step": r.get("step", 0), "version": r.get("version", 0),
                           "resumed": bool(r.get("resumed")), "steps_redone": len(steps) - len(kept)})
            steps = kept
        elif r["event"] == "step" and r["n_groups"] > 0:
            steps.append(r | {"start": max(len(starts) - 1, 0)})
    return starts, steps


def build_report(report_dir: Path, mode: str, timeline: GenerationTimeline, run_id: str, *,
                 stages_s: dict[str, float] | None = None, rollout_timings: list[dict[str, float]] | None = None,
                 **job: Any) -> TrainReport:
    """The run's report at the end of this job start: the counts, idle times and adapter loads
    of this start (its learner log rows and timeline), the ``steps``, ``reward_by_task`` and
    ``starts`` of every start of the run (:func:`run_history`), with the job's own fields
    (``run_status``, ``budget``, ``learner_exitcode``, ``evaluation``...: the rest of
    :class:`~gymfleet.run.records.TrainReport`'s fields) given as ``job``.

    Args:
        stages_s, rollout_timings: the job's stages' seconds and the GRPO rollouts' timings, for
            ``wall_time`` (:func:`wall_time`); None: no ``wall_time``.

    Raises:
        TypeError: ``job`` names a field the report does not have.
    """
    every = read_steps(report_dir)
    rows = [r for r in every if r.get("t", 0) >= timeline.started_at]
    steps = [r for r in rows if r["event"] == "step"]
    trained = [r for r in steps if r["n_groups"] > 0]
    starts, history = run_history(every)
    origin = min([timeline.started_at] + [s["t"] for s in starts[:1]])
    staleness = Counter(lag for r in steps for lag in r["filter"]["staleness"])
    wall = max(timeline.wall_s, 1e-9)
    learner_idle = sum(r["idle_s"] for r in steps) + sum(r.get("idle_s", 0.0) for r in rows if r["event"] == "end")
    rewards: dict[str, list[dict[str, float]]] = {}
    for r in history:
        for task, value in r["reward_by_task"].items():
            rewards.setdefault(task, []).append({"t_s": r["t"] - origin, "reward": value, "start": r["start"]})
    summary: dict[str, Any] = {
        "run_id": run_id,
        "mode": mode,
        "wall_s": timeline.wall_s,
        "n_steps": len(trained),
        "n_claims_all_dropped": len(steps) - len(trained),
        "last_step": trained[-1]["step"] if trained else None,
        "final_version": max([r.get("version", 0) for r in rows] + [ld.version for ld in timeline.loads] + [0]),
        "learner_idle_s": learner_idle,
        "learner_idle_fraction": learner_idle / wall,
        "generation_idle_s": timeline.generation_idle_s,
        "generation_idle_fraction": timeline.generation_idle_s / wall,
        "staleness_paused_s": timeline.staleness_paused_s,
        "staleness_histogram": {str(k): v for k, v in sorted(staleness.items())},
        "tokens_trained": sum(r["n_tokens"] for r in steps),
        # groups whose rewards were all equal carry no gradient (skipped and refilled when
        # learner.dynamic_sampling is on); logs from before these fields count as 0
        "zero_variance_groups": sum(r.get("n_zero_variance_groups", 0) for r in steps),
        "refill_extra_claims": sum(r.get("n_extra_claims", 0) for r in steps),
        "steps_short": sum(1 for r in steps if r.get("n_groups_short", 0) > 0),
        "tokens_masked": sum(r["masked_fraction"] * r["n_tokens"] for r in steps),
        "reward_by_task": rewards,
        "adapter_loads": [asdict(ld) | {"t": ld.t - timeline.started_at} for ld in timeline.loads],
        "adapter_load_failures": [asdict(f) | {"t": f.t - timeline.started_at} for f in timeline.load_failures],
        "served_version": max([ld.version for ld in timeline.loads] + [0]),
        "tasks_left_out": timeline.left_out,
        "learner_device": next((r.get("device") for r in reversed(rows) if r["event"] == "start"), None),
        "steps": [_step_row(r) for r in history],
        "starts": [s | {"t_s": s["t"] - origin} for s in starts],
        "dropped_claims": [{"after_step": r["step"], "t_s": r["t"] - origin, "filter": r["filter"]}
                           for r in steps if r["n_groups"] == 0],
    }
    if stages_s is not None:
        summary["wall_time"] = wall_time(stages_s, rollout_timings or [], {**summary, "steps": trained})
    return TrainReport(**summary | _threads(rows, job))


def _step_row(r: dict[str, Any]) -> dict[str, Any]:
    return ({k: r[k] for k in STEP_KEYS} | {"filter": r["filter"], "start": r["start"]}
            | {k: r.get(k, 0) for k in ("n_zero_variance_groups", "n_extra_claims", "n_groups_short")})


def _threads(rows: list[dict[str, Any]], job: dict[str, Any]) -> dict[str, Any]:
    """``job`` with ``torch_threads.learner`` the threads the learner's ``start`` row reports
    (the configured count when it reported none)."""
    threads = dict(job.get("torch_threads") or {})
    seen = next((r.get("torch_threads") for r in reversed(rows) if r["event"] == "start"), None)
    return job | {"torch_threads": threads | {"learner": seen or threads.get("learner")}}


def wall_time(stages_s: dict[str, float], timings: list[dict[str, float]],
              report: Mapping[str, Any]) -> dict[str, Any]:
    """Where a run's wall time went: the job's stages, and inside GRPO the seconds each side spent.

    Args:
        stages_s: seconds per stage of the job (``warm_start``, ``grpo``, ``heldout``), wall clock.
        timings: the GRPO rollouts' ``Trajectory.timings`` (``generation_s``, ``env_s``, ``reset_s``,
            ``close_s``; :class:`~gymfleet.orchestrator.rollout.Rollout`).
        report: the report so far (its learner ``steps`` and ``adapter_loads``).

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

    steps = report.get("steps") or []
    return {
        "stages_s": {k: round(v, 1) for k, v in stages_s.items()} | {"total": round(sum(stages_s.values()), 1)},
        "grpo": {
            "rollouts": len(timings),
            "generation_s": total("generation_s"), "env_s": total("env_s"),
            "reset_s": total("reset_s"), "close_s": total("close_s"),
            "learner_step_s": round(sum(r.get("duration_s", 0.0) for r in steps), 1),
            "learner_idle_s": round(sum(r.get("idle_s", 0.0) for r in steps), 1),
            "adapter_load_s": round(sum(ld.get("load_s", 0.0) for ld in report.get("adapter_loads") or []), 1),
        },
    }


def write_report(report_dir: Path, report: TrainReport) -> Path:
    """Writes report.json (:meth:`TrainReport.to_dict`, the one serialisation) and the PNGs;
    returns the path of report.json."""
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / "report.json"
    content = report.to_dict()
    path.write_text(json.dumps(content, indent=2, default=str))
    _plots(report_dir, content)
    return path


def _plots(report_dir: Path, report: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    resumes = [s for s in report.get("starts", []) if s["start"] > 0]
    fig, ax = plt.subplots(figsize=(7, 4))
    for task, pts in report["reward_by_task"].items():
        ax.plot([p["t_s"] for p in pts], [p["reward"] for p in pts], marker="o", label=task)
    for s in resumes:
        ax.axvline(s["t_s"], color="grey", linestyle="--", linewidth=1)
        ax.annotate(f"resumed (v{s['version']})", (s["t_s"], 1.0), xycoords=("data", "axes fraction"),
                    fontsize=7, rotation=90, va="top", ha="right", color="grey")
    ax.set(xlabel="seconds since the run's first start", ylabel="mean reward of the step's samples",
           title=f"{report['run_id']} ({report['mode']}): reward per task")
    if report["reward_by_task"]:
        ax.legend()
    _save(fig, report_dir / "reward.png")

    steps = report["steps"]
    fig, axes = plt.subplots(2, 2, figsize=(9, 6))
    for ax, key in zip(axes.flat, ("loss", "masked_fraction", "mean_ratio", "kl")):
        for start in sorted({s.get("start", 0) for s in steps}):
            mine = [s for s in steps if s.get("start", 0) == start]
            ax.plot([s["step"] for s in mine], [s[key] for s in mine], marker=".", label=f"starts[{start}]")
        for s in resumes:
            ax.axvline(s["step"] + 0.5, color="grey", linestyle="--", linewidth=1)
        ax.set(xlabel="learner step", title=key)
    if resumes:
        axes.flat[0].legend(fontsize=7, title="dashed: resumed", title_fontsize=7)
    _save(fig, report_dir / "learner.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    hist = report["staleness_histogram"]
    ax.bar(list(hist), list(hist.values()))
    ax.set(xlabel="policy versions behind the learner", ylabel="samples trained", title="staleness")
    _save(fig, report_dir / "staleness.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(["learner waiting for data", "generation waiting for learner"],
           [report["learner_idle_s"], report["generation_idle_s"]])
    ax.set(ylabel="seconds", title=f"idle time of {report['wall_s']:.0f} s ({report['mode']})")
    _save(fig, report_dir / "idle.png")
    if report.get("evaluation"):
        _heldout_plot(report_dir, report["run_id"], report["evaluation"])


POLICY_ORDER = ("base", "warm_start", "final")


def _heldout_plot(report_dir: Path, run_id: str, evaluation: dict[str, Any]) -> None:
    """``heldout.png``: pass@1 per family, one bar per policy side by side, ± 1 SE; under each family its
    gains (warm start vs base, final vs warm start) in standard errors of the difference."""
    import matplotlib.pyplot as plt

    families = list(evaluation["by_family"])
    policies = [p for p in POLICY_ORDER if any(p in evaluation["by_family"][f] for f in families)]
    width = 0.8 / max(len(policies), 1)
    fig, ax = plt.subplots(figsize=(max(6, 3.6 * len(families) + 2), 4.5))
    for i, policy in enumerate(policies):
        scores = [evaluation["by_family"][f].get(policy) for f in families]
        bars = ax.bar([k + (i - (len(policies) - 1) / 2) * width for k in range(len(families))],
                      [s["pass_at_1"] if s else 0.0 for s in scores], width,
                      yerr=[s["se"] if s else 0.0 for s in scores], capsize=3, label=policy)
        ax.bar_label(bars, labels=[f"{s['pass_at_1']:.2f}" if s else "" for s in scores], fontsize=8)
    ns = {f: max((s["n"] for s in evaluation["by_family"][f].values()), default=0) for f in families}
    gains = evaluation.get("gains") or {}
    ax.set_xticks(range(len(families)), [f"{f}\n(n={ns[f]})" + "".join(
        f"\n{name.replace('_vs_', ' vs ').replace('_start', '')}: {g['delta']:+.2f} ({Gain(**g).in_se()})"
        for name, g in gains.get(f, {}).items() if name != "final_vs_base") for f in families])
    ax.set(ylim=(0, 1.1), ylabel=f"pass@1 (reward >= {evaluation['threshold']:g}) ± SE",
           title=f"{run_id}: held-out pass@1")
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    _save(fig, report_dir / "heldout.png")


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    import matplotlib.pyplot as plt

    plt.close(fig)
