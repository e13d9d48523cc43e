"""One run, 1, 2 and 4 orchestrator shards: rollouts/s against the ideal at 10,000 in flight.

Each shard is its own process running benchmarks/orchestrator.py's part 1 (the real Scheduler,
the long-tailed synthetic env and policy latencies) on ONE run in ONE PostgreSQL database, with
``--in-flight / N`` rollouts in flight each; the samples are split between them through the
store's leases (``SELECT ... FOR UPDATE SKIP LOCKED``). For each N it reports the summed
rollouts/s over the steady window, the ideal (in_flight / E[rollout latency], Little's law) and
their ratio, the shards' achieved concurrency, and the machine's load. N=1 is the baseline of the
same run.

Usage: ``python benchmarks/shards.py [--in-flight 10000] [--shards 1,2,4] [--duration-s 60]
[--warmup-s 20] [--pg-url URL]`` (default ``$GYMFLEET_TEST_PG_URL``). Prints one JSON object;
progress goes to stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from orchestrator import Latencies, scheduler_bench  # noqa: E402  (benchmarks/orchestrator.py)

from gymfleet.orchestrator.loop import run_loop  # noqa: E402

err = Console(stderr=True)


async def _database(admin_url: str, name: str, create: bool) -> None:
    engine = create_async_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f"CREATE DATABASE {name}" if create else f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    finally:
        await engine.dispose()


def _shards(n: int, in_flight: int, duration_s: float, warmup_s: float, url: str) -> list[dict[str, Any]]:
    """Runs ``n`` shard processes on one run at once; each one's scheduler figures."""
    run_id = f"shards-{n}-{uuid.uuid4().hex[:6]}"
    args = ["--worker", "--in-flight", str(in_flight // n), "--duration-s", str(duration_s), "--warmup-s",
            str(warmup_s), "--pg-url", url, "--run-id", run_id]
    procs = [subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True) for _ in range(n)]
    outs = [p.communicate()[0] for p in procs]
    for p in procs:
        if p.returncode != 0:
            raise SystemExit(f"a shard process failed (exit {p.returncode}); see its output above")
    return [json.loads(out) for out in outs]


def main(
    in_flight: Annotated[int, typer.Option(help="Rollouts in flight over all shards.")] = 10_000,
    shards: Annotated[str, typer.Option(help="Shard counts to run, comma-separated.")] = "1,2,4",
    duration_s: Annotated[float, typer.Option(help="Seconds each shard runs.")] = 60.0,
    warmup_s: Annotated[float, typer.Option(help="Seconds before the steady window starts.")] = 20.0,
    pg_url: Annotated[str | None, typer.Option(help="PostgreSQL URL (default $GYMFLEET_TEST_PG_URL).")] = None,
    worker: Annotated[bool, typer.Option(hidden=True)] = False,
    run_id: Annotated[str, typer.Option(hidden=True)] = "shards",
) -> None:
    """Prints one JSON object: per shard count, rollouts/s against the ideal."""
    pg_url = pg_url or os.environ.get("GYMFLEET_TEST_PG_URL")
    if not pg_url:
        err.print("benchmarks/shards.py needs PostgreSQL: set GYMFLEET_TEST_PG_URL (make services) or pass --pg-url")
        raise typer.Exit(2)
    if worker:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run_loop(scheduler_bench(in_flight, duration_s, warmup_s, Path(tmp), pg_url, run_id),
                                      "uvloop")))
        return
    ideal = in_flight / Latencies.mean_rollout_s()
    results: dict[str, Any] = {"in_flight": in_flight, "ideal_rollouts_per_s": round(ideal, 1),
                               "cpu_count": os.cpu_count(), "by_shards": {}}
    for n in (int(x) for x in shards.split(",")):
        name = f"gymfleet_shards_{uuid.uuid4().hex[:8]}"
        url = make_url(pg_url).set(database=name).render_as_string(hide_password=False)
        asyncio.run(_database(pg_url, name, create=True))
        err.print(f"{n} shard(s), {in_flight // n} in flight each, {duration_s:g} s")
        try:
            each = _shards(n, in_flight, duration_s, warmup_s, url)
        finally:
            asyncio.run(_database(pg_url, name, create=False))
        rate = sum(r["rollouts_per_s"] for r in each)
        results["by_shards"][str(n)] = {
            "rollouts_per_s": round(rate, 1), "ratio_to_ideal": round(rate / ideal, 3),
            "achieved_concurrency": round(sum(r["achieved_concurrency"] for r in each), 1),
            "per_shard_rollouts_per_s": [r["rollouts_per_s"] for r in each],
            "scheduler_overhead_us_per_step": [r["scheduler_overhead_us_per_step"] for r in each],
            "rollout_overhead_ms_per_turn": [r["rollout_overhead_ms_per_turn"] for r in each],
            "load_average_1m": round(os.getloadavg()[0], 1),
        }
        err.print(f"  {rate:.1f} rollouts/s ({rate / ideal:.3f} of ideal)")
    base = results["by_shards"].get("1")
    if base:
        for n, r in results["by_shards"].items():
            r["vs_1_shard"] = round(r["rollouts_per_s"] / base["rollouts_per_s"], 3)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    typer.run(main)
