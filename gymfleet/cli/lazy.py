"""A command group whose commands are imported only when one of them runs or shows its help.

The command modules import heavy stacks (torch, transformers, SQLAlchemy, the docker SDK,
Playwright); ``gymfleet --help`` must not pay for them. :class:`LazyGroup` keeps, for each
command, where it lives (``module``, ``attr``) and a one-line summary for the top-level help;
the module is imported the first time the command is looked up for anything but that listing.

Errors: a :class:`LazyCommand` that names a missing module or attribute raises
``ImportError`` / ``AttributeError`` when that command is first used (a bug, kept as a
traceback; ``tests/gymfleet/test_cli_front.py`` loads every command).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, ClassVar

import typer
from typer import _click

from gymfleet.cli.errors import GymfleetGroup


@dataclass(frozen=True)
class LazyCommand:
    """Where one command lives: ``module.attr`` is a typer command function or a ``typer.Typer``
    command group; ``summary`` is its line in ``gymfleet --help``."""

    module: str
    attr: str
    summary: str


def load_command(name: str, spec: LazyCommand) -> _click.Command:
    """Imports ``spec`` and returns it as the click command named ``name``."""
    target = getattr(import_module(spec.module), spec.attr)
    if isinstance(target, typer.Typer):
        group = typer.main.get_group(target)
        group.name = name
        return group
    single = typer.Typer(add_completion=False)  # completion is the top-level app's (it has none either)
    single.command(name)(target)
    return typer.main.get_command(single)


def _flag_type(self: typer.core.TyperOption, ctx: _click.Context) -> str | None:
    return None if self.is_flag else typer.core.TyperOption.display_type(self, ctx)


# A flag takes no value: its help row shows no ``<bool>`` (typer has no setting for this).
typer.core.TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


class LazyGroup(GymfleetGroup):
    """:class:`GymfleetGroup` with commands from :attr:`lazy_commands` (name -> LazyCommand, in
    the order the help lists them), each imported on first use."""

    lazy_commands: ClassVar[dict[str, LazyCommand]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return [*self.lazy_commands, *(n for n in self.commands if n not in self.lazy_commands)]

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        spec = self.lazy_commands.get(cmd_name)
        if spec is None:
            return None
        if self._listing:
            return typer.core.TyperCommand(cmd_name, help=spec.summary, short_help=spec.summary)
        command = load_command(cmd_name, spec)
        self.commands[cmd_name] = command
        return command

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        """The group's own help: commands listed by their summaries, none imported."""
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
