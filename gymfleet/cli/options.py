"""The command-line arguments several commands share, declared once (typer reads them from the
annotation)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

TrainConfigArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Training config (YAML).")]
"""A training config file (`gymfleet train`, `learn`, `sft`)."""
SetOption = Annotated[
    list[str] | None, typer.Option("--set", help="Override a config field: KEY.PATH=VALUE (repeatable).")
]
"""Config overrides, ``KEY.PATH=VALUE``, repeatable."""
BucketOption = Annotated[str | None, typer.Option(help="fsspec URL of the adapter bucket (overrides the config's).")]
"""The adapter bucket's fsspec URL, over the config's."""
ReportToOption = Annotated[str | None, typer.Option(
    "--report-to", metavar="TRACKERS",
    help="Experiment trackers, comma-separated: tensorboard, wandb (offline), or none; overrides the config's report_to.")]
"""The ``report_to`` trackers, comma-separated, over the config's."""


def report_to_overrides(report_to: str | None) -> list[str]:
    """``--report-to`` as a ``report_to=...`` override (none when the option is not given)."""
    return [] if report_to is None else [f"report_to={json.dumps(report_to)}"]
