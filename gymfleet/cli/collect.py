"""`gymfleet collect CONFIG`: runs rollout collection only (evaluation or data generation), or, given
a training config, one orchestrator shard of that run, following its learner's bucket."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from gymfleet.cli.options import SetOption
from gymfleet.orchestrator import fill_run_id, run_loop, display_url
from gymfleet.run.collection import collect
from gymfleet.run.config import load_shard_config, url_overrides
from gymfleet.run.display import PLAIN_INTERVAL_S

console = Console(stderr=True)
console.soft_wrap = not console.is_terminal  # piped: lines stay whole (never cut at 80 columns)


def collect_command(
    config: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Run config (YAML).")],
    set_: SetOption = None,
    run_id: Annotated[str | None, typer.Option(help="Run id (default: the config's, else its file name).")] = None,
    store: Annotated[str | None, typer.Option(help="Store URL (overrides the config's).")] = None,
    bucket: Annotated[str | None, typer.Option(
        help="fsspec URL of the adapter bucket to follow (where `gymfleet learn` publishes): each new "
             "version is hot-loaded. Default: a training config's own bucket; none for a run config.")] = None,
    progress: Annotated[bool, typer.Option(
        help="A live progress table on a terminal; with --no-progress, or when output is not a terminal "
             "(CI, nohup, a log file), plain progress lines instead.")] = True,
    progress_every: Annotated[float, typer.Option(
        min=0.1, max=30.0, help="Seconds between plain progress lines.")] = PLAIN_INTERVAL_S,
) -> None:
    """Collects rollouts as the config says and stores every trajectory; rerun to resume."""
    overrides = list(set_ or [])
    if run_id:
        overrides.append(f"run_id={json.dumps(run_id)}")  # quoted: the id as typed, never parsed as YAML
    overrides += url_overrides(store, None)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    cfg, run_bucket = load_shard_config(config, overrides)  # errors: one line, exit 2 (gymfleet.cli.errors)
    follower = None
    if bucket or run_bucket:
        from gymfleet.run.follow import BucketFollower
        from gymfleet.trainer import AdapterBucket

        bucket_url = fill_run_id(bucket, cfg.run_id) if bucket else run_bucket
        follower = BucketFollower(AdapterBucket(bucket_url, cfg.run_id), Path(f"runs/{cfg.run_id}/adapters"), console)
    outcome = run_loop(collect(cfg, config_path=config, overrides=overrides, console=console,
                               live=progress and console.is_terminal, progress_every_s=progress_every,
                               follower=follower))
    console.print(
        f"run {outcome.run_id}: {outcome.status.value}, {outcome.completed} rollouts this start "
        f"{outcome.by_status}; requeued {outcome.n_requeued} (of which {outcome.n_aborted_on_restart} "
        f"were in flight at the last stop); store {display_url(cfg.store)}",
        markup=False, highlight=False,
    )
    for message in outcome.quarantined.values():
        console.print(Text("quarantined: ", style="red") + Text(message))
    if not outcome.status.finished:
        raise typer.Exit(3)
