"""Trajectory viewer speed: each page's latency (p50/p95) over a store of 100,000 trajectories.

Writes (or reuses) a SQLite store of ``--n-trajectories`` synthetic trajectories (groups of 4, two
tasks, eight policy versions, each trajectory about ``--tokens`` tokens with its turns;
``tests/view/synthetic.py``) through the real ``TrajectoryStore``, starts the real command,
``gymfleet view --runs-dir DIR --token-ids`` (uvicorn, its own process), and times what a browser
fetches for each page, one request after another: the page's HTML shell and every API call its
script makes on load. Pages: runs, run (tallies over every trajectory), trajectories (newest page
and a page at a random cursor deep in the run; filtered by task and status), groups (newest and a
random deep page), group, trajectory (a random one, all its token arrays). Text search scans the
messages and is reported apart. Baseline: the HTML shell alone (a static file), in the same run.

Usage: ``python benchmarks/view.py [--n-trajectories 100000] [--requests 100] [--dir DIR]``
Prints one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gymfleet.orchestrator.store import TrajectoryStore  # noqa: E402
from gymfleet.orchestrator.store.schema import RunStatus  # noqa: E402
from gymfleet.view.records import Cursor  # noqa: E402
from tests.view.synthetic import fill_run  # noqa: E402

RUN_ID = "bench-view"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def build_store(runs_dir: Path, n_trajectories: int, tokens: int) -> float:
    """Writes the run; returns seconds taken (0 when the store was there already)."""
    path = runs_dir / RUN_ID / "store.db"
    if path.exists():
        return 0.0
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    async with await TrajectoryStore.open(str(path)) as store:
        await fill_run(store, RUN_ID, n_trajectories // 4, observation_chars=tokens * 4)
        await store.set_run_status(RUN_ID, RunStatus.completed)
    return time.monotonic() - t0


def sample_keys(path: Path, n: int, seed: int) -> dict[str, list[Any]]:
    """Random rollouts, groups and cursors of the run (read with sqlite3, outside the timings)."""
    rng = random.Random(seed)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        top = db.execute("SELECT max(rowid) FROM trajectories").fetchone()[0]
        rows = [db.execute("SELECT rollout_id, group_id, created_at FROM trajectories WHERE rowid >= ? LIMIT 1",
                           (rng.randint(1, top),)).fetchone() for _ in range(n)]
        gtop = db.execute("SELECT max(rowid) FROM groups").fetchone()[0]
        groups = [db.execute("SELECT group_id, created_at FROM groups WHERE rowid >= ? LIMIT 1",
                             (rng.randint(1, gtop),)).fetchone() for _ in range(n)]

    def cursor(row_id: str, created: str) -> str:
        return Cursor(datetime.fromisoformat(created).replace(tzinfo=UTC), row_id).encode()

    return {"rollouts": [r[0] for r in rows], "groups": [r[1] for r in rows],
            "traj_cursors": [cursor(r[0], r[2]) for r in rows], "group_cursors": [cursor(g[0], g[1]) for g in groups]}


def pages(keys: dict[str, list[Any]], i: int) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """Request ``i`` of each page: its HTML shell, then its script's API calls on load."""
    api = f"/api/runs/{RUN_ID}"
    return {
        "html_shell_only": [("/", {})],
        "runs": [("/", {}), ("/api/runs", {})],
        "run": [(f"/run/{RUN_ID}", {}), (api, {})],
        "trajectories_newest": [(f"/run/{RUN_ID}/trajectories", {}), (f"{api}/trajectories", {})],
        "trajectories_deep": [(f"/run/{RUN_ID}/trajectories", {}), (f"{api}/trajectories", {"before": keys["traj_cursors"][i]})],
        "trajectories_filtered": [(f"/run/{RUN_ID}/trajectories", {}),
                                  (f"{api}/trajectories", {"task": "miniwob", "status": "infra_error"})],
        "groups_newest": [(f"/run/{RUN_ID}/groups", {}), (f"{api}/groups", {})],
        "groups_deep": [(f"/run/{RUN_ID}/groups", {}), (f"{api}/groups", {"before": keys["group_cursors"][i]})],
        "group": [(f"/run/{RUN_ID}/group", {}), (f"{api}/group", {"id": keys["groups"][i]})],
        "trajectory": [(f"/run/{RUN_ID}/trajectory", {}), (f"{api}/trajectory", {"id": keys["rollouts"][i]})],
    }


def time_pages(base: str, keys: dict[str, list[Any]], n: int, warmup: int) -> dict[str, dict[str, float]]:
    samples: dict[str, list[float]] = {}
    with httpx.Client(base_url=base, timeout=60) as client:
        for i in range(warmup + n):
            for name, requests in pages(keys, i % len(keys["rollouts"])).items():
                t0 = time.perf_counter()
                for path, params in requests:
                    response = client.get(path, params=params)
                    if response.status_code != 200:
                        raise SystemExit(f"{path} {params}: HTTP {response.status_code} {response.text[:200]}")
                if i >= warmup:
                    samples.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
    return {name: summary(ms) for name, ms in samples.items()}


def summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1), "max_ms": round(ordered[-1], 1)}


def time_search(base: str, terms: list[str]) -> dict[str, float]:
    out = {}
    with httpx.Client(base_url=base, timeout=120) as client:
        for term in terms:
            t0 = time.perf_counter()
            client.get(f"/api/runs/{RUN_ID}/trajectories", params={"text": term}).raise_for_status()
            out[term] = round((time.perf_counter() - t0) * 1000, 1)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(
    n_trajectories: Annotated[int, typer.Option(help="Trajectories in the store.")] = 100_000,
    tokens: Annotated[int, typer.Option(help="About this many tokens per trajectory.")] = 300,
    requests: Annotated[int, typer.Option(help="Timed loads of each page.")] = 100,
    warmup: Annotated[int, typer.Option(help="Untimed loads of each page first.")] = 5,
    dir: Annotated[Path, typer.Option("--dir", help="Runs folder (the store is kept and reused).")] = Path("runs/bench-view-runs"),
) -> None:
    """Measures the viewer's pages over a large store."""
    log(f"writing {n_trajectories} trajectories (reused when present) under {dir}")
    write_s = asyncio.run(build_store(dir, n_trajectories, tokens))
    store = dir / RUN_ID / "store.db"
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "gymfleet.cli", "view", "--runs-dir", str(dir), "--port", str(port),
                               "--token-ids"], stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                httpx.get(base + "/", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        keys = sample_keys(store, requests + warmup, seed=0)
        log(f"timing {requests} loads of each page")
        results = time_pages(base, keys, requests, warmup)
        search = time_search(base, ["velvet", "tests: 1 failed", "no such text anywhere"])
    finally:
        server.terminate()
        server.wait(timeout=30)
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        n_stored = db.execute("SELECT count(*) FROM trajectories").fetchone()[0]
        mean_tokens = db.execute("SELECT avg(n_tokens) FROM trajectories").fetchone()[0]
    print(json.dumps({
        "store": {"trajectories": n_stored, "mean_tokens": round(mean_tokens, 1), "bytes": store.stat().st_size,
                  "write_s": round(write_s, 1) if write_s else "reused"},
        "cores": os.cpu_count(), "load_average_after": os.getloadavg(),
        "pages": results,
        "worst_p95_ms": max(v["p95_ms"] for k, v in results.items() if k != "html_shell_only"),
        "text_search_ms": search,
    }, indent=2))


if __name__ == "__main__":
    typer.run(main)
