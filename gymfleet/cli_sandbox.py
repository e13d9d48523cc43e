"""`gymfleet sandbox gc`: remove sandboxes left behind, on every backend available here."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from gymfleet.envs.errors import SandboxError
from gymfleet.envs.sandbox import BACKENDS, _load

sandbox_app = typer.Typer(no_args_is_help=True, help="Sandboxes (containers, local sandboxes).")
console = Console()


@sandbox_app.command("gc")
def gc(
    run_id: Annotated[str | None, typer.Option("--run-id", help="Only sandboxes of this run.")] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Also remove live, unexpired sandboxes (of --run-id, or all).")
    ] = False,
) -> None:
    """Removes expired sandboxes and those whose owner process is gone (with --all: every one)."""
    total = 0
    for name in BACKENDS:
        try:
            backend = _load(name)
        except (ImportError, SandboxError) as exc:
            console.print(f"{name}: skipped ({exc})", style="dim")
            continue
        if not backend.available():
            console.print(f"{name}: not available here, skipped", style="dim")
            continue
        # a backend may sweep orphans and expired sandboxes of every run when it is made (local)
        at_start = int(getattr(backend, "swept_at_start", 0))
        removed = at_start + asyncio.run(backend.gc(run_id=run_id, expired_only=not all_))
        detail = f" ({at_start} orphaned or expired, of any run, in the start-up sweep)" if at_start else ""
        console.print(f"{name}: removed {removed} sandbox(es){detail}")
        total += removed
    console.print(f"[bold]removed {total}[/]")
