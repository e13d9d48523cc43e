"""`gymfleet collect CONFIG`: runs rollout collection only (evaluation or data generation)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from gymfleet.core.errors import GymfleetError
from gymfleet.orchestrator.config import load_run_config
from gymfleet.orchestrator.loop import run_loop
from gymfleet.run.collection import collect
from gymfleet.run.display import PLAIN_INTERVAL_S

console = Console(stderr=True)


def collect_command(
    config: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Run config (YAML).")],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a config field: KEY.PATH=VALUE (repeatable).")
    ] = None,
    run_id: Annotated[str | None, typer.Option(help="Run id (default: the config's, else its file name).")] = None,
    store: Annotated[str | None, typer.Option(help="Store URL (overrides the config's).")] = None,
    progress: Annotated[bool, typer.Option(
        help="A live progress table on a terminal; with --no-progress, or when output is not a terminal "
             "(CI, nohup, a log file), plain progress lines instead.")] = True,
    progress_every: Annotated[float, typer.Option(
        min=0.1, max=30.0, help="Seconds between plain progress lines.")] = PLAIN_INTERVAL_S,
) -> None:
    """Collects rollouts as the config says and stores every trajectory; rerun to resume."""
    overrides = list(set_ or [])
    if run_id:
        overrides.append(f"run_id={run_id}")
    if store:
        overrides.append(f"store={store}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_run_config(config, overrides)
        outcome = run_loop(collect(cfg, config_path=config, overrides=overrides, console=console,
                                   live=progress and console.is_terminal, progress_every_s=progress_every))
    except GymfleetError as exc:  # a config, store, sandbox or policy that cannot be used: one line
        console.print(Text("error: ", style="red") + Text(str(exc)))
        raise typer.Exit(2) from exc
    console.print(
        f"run {outcome.run_id}: {outcome.status.value}, {outcome.completed} rollouts this start "
        f"{outcome.by_status}; requeued {outcome.n_requeued} (of which {outcome.n_aborted_on_restart} "
        f"were in flight at the last stop); store {cfg.store}",
        markup=False, highlight=False,
    )
    for message in outcome.quarantined.values():
        console.print(Text("quarantined: ", style="red") + Text(message))
    if not outcome.status.finished:
        raise typer.Exit(3)
