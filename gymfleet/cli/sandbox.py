"""`gymfleet sandbox gc`: remove sandboxes left behind, on every backend available here."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from gymfleet.envs.sandbox import sweep

sandbox_app = typer.Typer(no_args_is_help=True, help="Sandboxes (containers, local sandboxes).")


def console() -> Console:
    """A console sized for the terminal at the time of the call (a module-level one would keep the
    width of whatever first imported this lazily loaded module)."""
    return Console()


@sandbox_app.command("gc")
def gc(
    run_id: Annotated[str | None, typer.Option("--run-id", help="Only sandboxes of this run.")] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Also remove live, unexpired sandboxes (of --run-id, or all).")
    ] = False,
) -> None:
    """Removes expired sandboxes and those whose owner process is gone (with --all: every one)."""
    total = 0
    for result in asyncio.run(sweep(run_id=run_id, expired_only=not all_)):
        if result.skipped:
            console().print(f"{result.backend}: skipped ({result.skipped})", style="dim")
            continue
        detail = f" ({result.at_start} orphaned or expired, of any run, in the start-up sweep)" if result.at_start else ""
        console().print(f"{result.backend}: removed {result.removed} sandbox(es){detail}")
        total += result.removed
    console().print(f"[bold]removed {total}[/]")
