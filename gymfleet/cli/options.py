"""The command-line arguments several commands share, declared once (typer reads them from the
annotation)."""

from __future__ import annotations

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
