"""`gymfleet train CONFIG`: the training job (orchestrator + engines + learner), async or sync."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.text import Text

from gymfleet.cli.options import ReportToOption, SetOption, TrainConfigArg, report_to_overrides
from gymfleet.run.display import PLAIN_INTERVAL_S

if TYPE_CHECKING:
    from gymfleet.run.placement import Placement
    from gymfleet.run.records import HeldOutSection, TrainReport

console = Console(stderr=True)
console.soft_wrap = not console.is_terminal  # piped: lines stay whole (never cut at 80 columns)


def train_command(
    config: TrainConfigArg,
    set_: SetOption = None,
    report_to: ReportToOption = None,
    progress: Annotated[bool, typer.Option(
        help="A live progress table on a terminal; with --no-progress, or when output is not a terminal "
             "(CI, nohup, a log file), plain progress lines instead.")] = True,
    progress_every: Annotated[float, typer.Option(
        min=0.1, max=30.0, help="Seconds between plain progress lines.")] = PLAIN_INTERVAL_S,
    cluster: Annotated[str | None, typer.Option(
        help="Place the roles on a Ray cluster: auto (the cluster this machine joined) or ray://HOST:PORT; "
             "the config's cluster: section says where each role goes (docs/cluster.md).")] = None,
    require_learning: Annotated[bool, typer.Option(
        "--require-learning", help="Exit 3 when no learner step was made, or when the held-out evaluation "
                                   "(heldout.enabled) finds the final adapter's pass@1 no better than the base's.")] = False,
) -> None:
    """Trains a LoRA adapter with GRPO on the config's task mix; rerun the same command to resume."""
    from gymfleet.run.config import load_train_config
    from gymfleet.run.job import RunCompleteError, run_job
    from gymfleet.run.local import LocalPlacement

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    cfg = load_train_config(config, list(set_ or []) + report_to_overrides(report_to))  # errors: one line, exit 2 (gymfleet.cli.errors)
    placement: Placement = LocalPlacement()
    if cluster is not None:
        from gymfleet.run.cluster import ray_placement

        placement = ray_placement(cfg, cluster)
    try:
        outcome = asyncio.run(run_job(cfg, placement, console=console, live=progress and console.is_terminal,
                                      progress_every_s=progress_every))
    except RunCompleteError as done:  # a rerun of a finished run: nothing to do, not an error
        console.print(str(done), markup=False, highlight=False, soft_wrap=True)
        return
    r = outcome.report
    console.print(
        f"run {r.run_id} ({r.mode}{', on Ray' if r.cluster is not None else ''}): {r.run_status}, {r.n_steps} learner "
        f"steps this start (last step {'-' if r.last_step is None else r.last_step}), "
        f"policy v{r.final_version}, {r.wall_s:.0f} s; learner idle {r.learner_idle_fraction:.0%}, "
        f"generation idle {r.generation_idle_fraction:.0%}; {r.zero_variance_groups} zero-variance groups"
        + _not_loaded(r),
        markup=False, highlight=False,
    )
    print(f"report: {outcome.report_path.resolve()} (PNG plots beside it)")
    _verdict(r, require_learning)
    from gymfleet.trainer import EXIT_REFUSED

    if outcome.learner_exitcode == EXIT_REFUSED:  # it said why (learner.jsonl's error row)
        from gymfleet.trainer import ErrorRow, last_row

        error = last_row(Path(cfg.report_dir), ErrorRow)
        why = error.message if error is not None else "see learner.log in the report folder"
        console.print(Text("the learner stopped: ", style="red") + Text(why), soft_wrap=True)
        raise typer.Exit(3)
    _policy_loaded(r)
    if outcome.learner_exitcode not in (0, None):
        console.print(Text("the learner process died ", style="red") + Text(
            f"(exit code {outcome.learner_exitcode}, see learner.log in the report folder); "
            "run the same command again to resume from the bucket"))
        raise typer.Exit(3)


def _verdict(report: TrainReport, require_learning: bool) -> None:
    """Prints the held-out lines and why nothing was learned (if so); with ``require_learning``,
    exits 3 when the run shows no learning (:func:`gymfleet.run.verdict.require_learning_failure`)."""
    for line in _evaluation_lines(report.evaluation):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if report.no_learning:
        console.print(report.no_learning, markup=False, highlight=False, soft_wrap=True)
    if require_learning:
        from gymfleet.run.verdict import require_learning_failure

        failed = require_learning_failure(report)
        if failed is not None:
            console.print(Text("--require-learning: ", style="red") + Text(failed), soft_wrap=True)
            raise typer.Exit(3)


def _policy_loaded(report: TrainReport) -> None:
    """Exits 3 when the run's newest policy could not be loaded: the last version the engines
    skipped (a corrupt one, one every replica refused) is newer than the one they serve, so the
    run ended without its policy being served (the report is written all the same)."""
    failures = report.adapter_load_failures
    if not failures:
        return
    last = max(failures, key=lambda f: f.version)
    if last.version > report.served_version:
        console.print(Text("the policy could not be loaded: ", style="red") + Text(
            f"v{last.version} was skipped by the engines ({last.error[:300]}); they serve "
            f"v{report.served_version}. Fix the replicas or the bucket, then run the same command again"),
            soft_wrap=True)
        raise typer.Exit(3)


def _not_loaded(report: TrainReport) -> str:
    """The summary's note on adapter versions the engines skipped (empty when none was)."""
    skipped = [f"v{f.version}" for f in report.adapter_load_failures]
    return f"; adapter versions not loaded: {', '.join(skipped)} (engines serve v{report.served_version})" if skipped else ""


def _evaluation_lines(evaluation: HeldOutSection | None) -> list[str]:
    """``held-out pass@1 (reward >= 1.0) echo: base 0.250 ± 0.153 (n=8), final ...; final vs warm start +0.250
    ± 0.234 (1.1 SE)`` per family (the gains: :func:`gymfleet.run.records.gains_text`), from the
    report's ``evaluation`` section."""
    from gymfleet.run.records import gains_text

    if evaluation is None:
        return []
    head = f"held-out pass@1 (reward >= {evaluation.threshold:g}) "
    return [head + f"{family}: " + ", ".join(f"{name} {s.describe()}" for name, s in by_policy.items())
            + gains_text(evaluation.gains.get(family, {}))
            for family, by_policy in evaluation.by_family.items()]
