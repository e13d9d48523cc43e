"""The command-line arguments several commands share, declared once (typer reads them from the
annotation)."""

from __future__ import annotations

import json
import re
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


VERSION_HELP = "v3, 3, v000003 or latest"
"""How a bucket version is written wherever a command takes one."""
_VERSION = re.compile(r"v?0*(\d+)|latest")


def pick_version(text: str, versions: list[int], where: str) -> int:
    """The bucket version ``text`` names (``v3``, ``3``, ``v000003`` or ``latest``, the newest).

    Args:
        versions: the committed versions, ascending.
        where: names the bucket and run in the error.

    Raises:
        ConfigError: ``text`` is not a version, or names none of ``versions`` (the message lists them).
    """
    from gymfleet.core.errors import ConfigError

    match = _VERSION.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"version {text!r}: write {VERSION_HELP}")
    version = max(versions, default=None) if match.group(1) is None else int(match.group(1))
    if version is None or version not in versions:
        have = ", ".join(f"v{v}" for v in versions) or "none published yet"
        raise ConfigError(f"version {text} is not in {where}: it holds {have}")
    return version
