"""Local sandbox latencies: start, exec round trip, close, pool reuse; prints JSON.

Baselines in the same run: ``bash -c true`` as a plain host subprocess (what an exec costs
without a sandbox), and a cold start (what a warm pool saves).

Usage: ``python benchmarks/local_sandbox.py [--n 20]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from gymfleet.envs.sandbox.base import SandboxSpec
from gymfleet.envs.sandbox.local import LocalBackend, LocalBackendConfig
from gymfleet.envs.sandbox.pool import SandboxPool


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


async def _sandbox_times(backend: LocalBackend, n: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"start": [], "exec": [], "close": []}
    for _ in range(n):
        sb = backend.create(SandboxSpec())
        t0 = time.perf_counter()
        await sb.start()
        t1 = time.perf_counter()
        for _ in range(5):
            t = time.perf_counter()
            await sb.exec("true")
            times["exec"].append(time.perf_counter() - t)
        t2 = time.perf_counter()
        await sb.close()
        times["start"].append(t1 - t0)
        times["close"].append(time.perf_counter() - t2)
    return times


async def _pool_times(backend: LocalBackend, n: int) -> list[float]:
    samples = []
    async with SandboxPool(backend) as pool:
        await pool.prewarm(SandboxSpec(), 1)
        for _ in range(n):
            t = time.perf_counter()
            async with pool.acquire(SandboxSpec()) as sb:
                await sb.exec("echo x > f")
            samples.append(time.perf_counter() - t)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="sandboxes (and pool uses) to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        backend = LocalBackend(LocalBackendConfig(state_dir=Path(state), allow_unisolated=False))
        if not backend.bwrap_works():
            raise SystemExit("bubblewrap does not work here: apt-get install bubblewrap")
        times = asyncio.run(_sandbox_times(backend, args.n))
        pool = asyncio.run(_pool_times(backend, args.n))
    host = []
    for _ in range(args.n * 5):
        t = time.perf_counter()
        subprocess.run(["bash", "-c", "true"], check=True)
        host.append(time.perf_counter() - t)
    exec_ms, host_ms = _median_ms(times["exec"]), _median_ms(host)
    start_ms, pool_ms = _median_ms(times["start"]), _median_ms(pool)
    print(json.dumps({
        "benchmark": "local_sandbox",
        "n": args.n,
        "start_ms_median": start_ms,
        "exec_roundtrip_ms_median": exec_ms,
        "close_ms_median": _median_ms(times["close"]),
        "host_bash_ms_median": host_ms,
        "exec_over_host_bash": round(exec_ms / host_ms, 2),
        "pool_acquire_exec_release_ms_median": pool_ms,
        "cold_start_over_pool_use": round(start_ms / pool_ms, 2),
    }, indent=2))


if __name__ == "__main__":
    main()
