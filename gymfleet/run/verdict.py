"""Did a training run learn? One line saying why it trained nothing, and ``--require-learning``'s check.

Both read only the report (:class:`~gymfleet.run.records.TrainReport`, built by
:func:`gymfleet.run.report.build_report` or read back with ``TrainReport.from_dict``), so a
report from disk or from ``train --cluster`` is judged the same way.
"""

from __future__ import annotations

from gymfleet.run.records import TrainReport
from gymfleet.trainer import EXIT_REFUSED


def no_learning_reason(report: TrainReport) -> str | None:
    """Why the run made no learner step (this start), in one line; None when it made one."""
    if report.n_steps > 0:
        return None
    if report.error:
        return f"no learner step: the run stopped on {report.error}"
    exitcode = report.learner_exitcode
    if exitcode == EXIT_REFUSED:  # it stopped on an error it wrote down
        return "no learner step: the learner stopped on an error (learner.jsonl's error row, learner.log)"
    if exitcode not in (0, None):
        return f"no learner step: the learner process died (exit code {exitcode}, see learner.log)"
    wall = report.budget.max_wall_s if report.budget is not None else None
    within = f" in max_wall_s ({wall:g} s)" if wall else ""
    if report.learner_device is None:  # no "start" row in learner.jsonl
        return (f"no learner step: the learner was not up yet (still loading the model) when the run ended{within}; "
                "raise budget.max_wall_s")
    zero = report.zero_variance_groups
    if zero:
        return (f"no learner step: every claimed group had zero reward variance ({zero} groups): all rollouts of "
                "a group earned the same reward; a warm start (warmstart.enabled) or easier instances give "
                "groups that disagree")
    if report.n_claims_all_dropped:
        return (f"no learner step: every claim's groups were dropped ({report.n_claims_all_dropped} claims; "
                "see dropped_claims[].filter in report.json: too stale or too long)")
    if report.adapter_load_failures:
        return (f"no learner step: the engines loaded no adapter ({len(report.adapter_load_failures)} versions "
                "failed to load)")
    return f"no learner step: generation produced no complete group{within}; raise budget.max_wall_s"


def require_learning_failure(report: TrainReport) -> str | None:
    """Why ``gymfleet train --require-learning`` fails (exit 3); None when the run learned.

    It fails when no learner step was made, or when the held-out evaluation ran and the final
    adapter's pass@1, pooled over the families (passes / rollouts), does not exceed the base
    model's (the task families' lines name each). Without an ``evaluation`` section only the
    learner steps are checked.
    """
    reason = no_learning_reason(report)
    if reason is not None:
        return reason
    families = report.evaluation.by_family if report.evaluation is not None else {}
    pairs = [(f, s["base"], s["final"]) for f, s in families.items() if "base" in s and "final" in s]
    if not pairs:
        return None
    base = sum(b.n_passed for _, b, _ in pairs) / max(sum(b.n for _, b, _ in pairs), 1)
    final = sum(x.n_passed for _, _, x in pairs) / max(sum(x.n for _, _, x in pairs), 1)
    if final > base:
        return None
    detail = ", ".join(f"{f} {x.pass_at_1:.3f} vs {b.pass_at_1:.3f}" for f, b, x in pairs)
    return (f"the final adapter's held-out pass@1 {final:.3f} does not exceed the base model's {base:.3f} "
            f"(final vs base: {detail})")
