"""`gymfleet learn CONFIG`: the learner of a training run on its own, joined to the rest of the run
by the store URL (where orchestrator shards, `gymfleet collect`, write groups) and the bucket URL
(where it publishes the adapters they follow)."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from gymfleet.cli.options import BucketOption, SetOption, TrainConfigArg
from gymfleet.orchestrator import display_url
from gymfleet.trainer import StepRow

if TYPE_CHECKING:
    from gymfleet.run.learner import LearnerHandle

console = Console(stderr=True)


def learn_command(
    config: TrainConfigArg,
    set_: SetOption = None,
    store: Annotated[str | None, typer.Option(help="Store URL the shards write to (overrides the config's).")] = None,
    bucket: BucketOption = None,
) -> None:
    """Trains the run's adapter from the groups in its store and publishes each version to its
    bucket, until the budget is spent or SIGINT/SIGTERM; rerun the same command to resume."""
    from gymfleet.run.config import load_train_config, url_overrides
    from gymfleet.run.learner import ThreadLearner
    from gymfleet.trainer import EndRow, last_row
    from gymfleet.run.resume import refuse_changed_settings

    cfg = load_train_config(config, list(set_ or []) + url_overrides(store, bucket))  # errors: one line, exit 2 (gymfleet.cli.errors)
    refuse_changed_settings(cfg)
    report = Path(cfg.report_dir)
    report.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=report / "learner.log", level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    learner = ThreadLearner(cfg.worker_args(), on_step=_print_step)
    _stop_on_signals(learner)
    console.print(f"learner of run {cfg.run.run_id}: store {display_url(cfg.run.store)}, bucket {cfg.bucket}",
                  markup=False, highlight=False)
    learner.start()
    asyncio.run(_run_out(learner, cfg.budget.max_wall_s))
    end = last_row(report, EndRow)
    where = f"at step {end.step}, policy v{end.version}" if end is not None else "before its first step"
    console.print(f"learner stopped {where} in {cfg.bucket}; "
                  "rerun the same command to resume", markup=False, highlight=False)


async def _run_out(learner: LearnerHandle, max_wall_s: float | None) -> None:
    """Until the learner spends its step budget, ``max_wall_s`` passes or a signal stops it."""
    await learner.run_out(max_wall_s)
    await learner.wait()


def _stop_on_signals(learner: LearnerHandle) -> None:
    """The first SIGINT/SIGTERM lets the step finish and what it trained be published; a second
    one stops at once."""
    def handler(signum: int, _: Any) -> None:
        if learner.stop_requested:
            raise KeyboardInterrupt
        console.print("stopping: the learner finishes its step and publishes what it trained")
        learner.stop()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _print_step(row: StepRow) -> None:
    console.print(f"step {row.step}: {row.n_groups} groups, mean reward {row.mean_reward:.3f}, "
                  f"loss {row.loss:.4f}, policy v{row.version}", markup=False, highlight=False)
