"""`gymfleet view`: the trajectory viewer, a local web app over the store (read-only; docs/view.md)."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from gymfleet.view.errors import NoStoreError

LOOPBACK = "127.0.0.1"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _fail(message: str) -> None:
    Console(stderr=True).print(Text("error: ", style="red") + Text(message), soft_wrap=True)
    raise typer.Exit(2)


def _check_port(host: str, port: int) -> None:
    """Raises OSError when ``host:port`` cannot be bound (in use, no such address), before the
    server starts (uvicorn would log it and exit 1)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host.strip("[]"), port))


def view_command(
    store: Annotated[str | None, typer.Option(
        "--store", help="Store URL (sqlite:///PATH, a path, or postgresql://...); default: every RUN_ID/store.db of --runs-dir.")] = None,
    runs_dir: Annotated[Path, typer.Option(
        envvar="GYMFLEET_RUNS_DIR", help="The folder holding the runs (RUN_ID/store.db, RUN_ID/report/): ./runs by default.")] = Path("runs"),
    host: Annotated[str, typer.Option(help="Interface to listen on: loopback by default; anything else lets "
                                           "whoever reaches it read every trajectory.")] = LOOPBACK,
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port.")] = 8765,
    token_ids: Annotated[bool, typer.Option("--token-ids", help="Show token ids, never load the run's tokenizer.")] = False,
) -> None:
    """Serves the trajectory viewer: runs, a run's rewards and learner, its groups and trajectories, live."""
    import uvicorn

    from gymfleet.view import StoreSet, create_app
    from gymfleet.view.tokens import IdsOnly, RunTokenizer

    stores = StoreSet(store, runs_dir)
    try:
        stores.check()
    except NoStoreError as exc:
        _fail(str(exc))
    try:
        _check_port(host, port)
    except OSError as exc:
        _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}; pass another --port (or --host)")
    allowed = None if _is_loopback(host) else ["*"]
    if allowed is not None:
        Console(stderr=True).print(Text(f"warning: serving on {host}: anyone who can reach it reads every trajectory "
                                        "of these stores (there is no login)", style="yellow"), soft_wrap=True)
    app = create_app(stores, IdsOnly() if token_ids else RunTokenizer(), allowed_hosts=allowed)
    shown = f"[{host}]" if ":" in host else host
    Console().print(f"gymfleet view: http://{shown}:{port}/  (Ctrl-C stops it)", highlight=False, markup=False)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
