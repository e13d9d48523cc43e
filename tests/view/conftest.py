"""The viewer's fixtures: a runs folder with a finished and a live run, served by a real uvicorn."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
import uvicorn

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.orchestrator.store.schema import RunStatus
from gymfleet.view import StoreSet, create_app
from gymfleet.view.tokens import IdsOnly, TokenDecoder


@dataclass
class Served:
    """A viewer answering at ``url`` over ``runs_dir``."""

    url: str
    runs_dir: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def serve() -> Iterator:
    """Starts the viewer over a runs folder in a uvicorn thread; stopped after the test."""
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(runs_dir: Path, decoder: TokenDecoder | None = None, store: str | None = None) -> Served:
        port = free_port()
        app = create_app(StoreSet(store, runs_dir), decoder or IdsOnly())
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        for _ in range(200):
            if server.started:
                break
            threading.Event().wait(0.05)
        servers.append((server, thread))
        return Served(f"http://127.0.0.1:{port}", runs_dir)

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


async def set_status(runs_dir: Path, run_id: str, status: RunStatus) -> None:
    async with await TrajectoryStore.open(str(runs_dir / run_id / "store.db")) as store:
        await store.set_run_status(run_id, status)


def write_learner_log(report_dir: Path, n_steps: int) -> None:
    """A ``learner.jsonl`` as the learner writes it (a start row, then one row per step)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"event": "start", "t": 0.0, "step": 0, "version": 0, "resumed": False}]
    rows += [{"event": "step", "t": float(i), "step": i, "loss": 0.1 / i, "mean_reward": 0.1 * i, "version": i,
              "n_groups": 2, "n_tokens": 900, "masked_fraction": 0.02, "kl": 0.001, "mean_ratio": 1.0,
              "duration_s": 1.5, "idle_s": 0.2, "published_version": i, "filter": {"staleness": [0, 1, 0, 1]}}
             for i in range(1, n_steps + 1)]
    (report_dir / "learner.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest_asyncio.fixture
async def open_store() -> AsyncIterator:
    """Opens stores (closed after the test)."""
    opened: list[TrajectoryStore] = []

    async def open_(path: Path) -> TrajectoryStore:
        path.parent.mkdir(parents=True, exist_ok=True)
        store = await TrajectoryStore.open(str(path))
        opened.append(store)
        return store

    yield open_
    for store in opened:
        await store.close()
