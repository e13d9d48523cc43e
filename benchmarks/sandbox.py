"""Sandbox latencies of each backend available here (docker, local); prints JSON.

Per backend: cold start (``start()`` of a new sandbox) p50/p95, warm-pool acquire (a
prewarmed :class:`SandboxPool` handing out a sandbox; the reset on release is timed apart) p50/p95,
exec round trip of ``true`` p50, and the wall time of N sandboxes started concurrently, each
running one command and closing. Baselines in the same run: ``bash -c true`` as a plain host
subprocess (what an exec costs with no sandbox), and N times the serial start+exec+close time
(what the concurrency buys).

Usage: ``python benchmarks/sandbox.py [--n 20] [--concurrent 64] [--backends docker,local]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console

from gymfleet.envs.sandbox.base import SandboxBackend, SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.pool import SandboxPool

RUN_ID = f"bench-sandbox-{os.getpid()}"
console = Console(stderr=True)


def _ms(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


async def _timed(fn: Callable[[], Awaitable[object]]) -> float:
    t = time.perf_counter()
    await fn()
    return time.perf_counter() - t


async def _cold(backend: SandboxBackend, spec: SandboxSpec, n: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"start": [], "exec": [], "close": []}
    for _ in range(n):
        sb = backend.create(spec, SandboxLabels(run_id=RUN_ID))
        times["start"].append(await _timed(sb.start))
        for _ in range(5):
            times["exec"].append(await _timed(lambda: sb.exec("true")))
        times["close"].append(await _timed(sb.close))
    return times


async def _pool(backend: SandboxBackend, spec: SandboxSpec, n: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"acquire": [], "release": []}
    async with SandboxPool(backend) as pool:
        await pool.prewarm(spec, 1, SandboxLabels(run_id=RUN_ID))
        for _ in range(n):
            t0 = time.perf_counter()
            async with pool.acquire(spec, SandboxLabels(run_id=RUN_ID)) as sb:
                t1 = time.perf_counter()
                await sb.exec("echo x > f")
                t2 = time.perf_counter()
            times["acquire"].append(t1 - t0)
            times["release"].append(time.perf_counter() - t2)
        assert pool.reused == n, f"the pool started {pool.created} sandboxes instead of reusing one"
    return times


async def _concurrent(backend: SandboxBackend, spec: SandboxSpec, n: int) -> float:
    async def one(i: int) -> None:
        async with backend.create(spec, SandboxLabels(run_id=RUN_ID)) as sb:
            result = await sb.exec(f"echo {i}")
            assert result.stdout == f"{i}\n", result

    t = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - t


def _backend(name: str, tmp: Path) -> tuple[SandboxBackend, SandboxSpec] | None:
    if name == "docker":
        from gymfleet.envs.images import ensure_image
        from gymfleet.envs.sandbox.docker import DockerBackend

        docker_backend = DockerBackend()
        if not docker_backend.available():
            return None
        return docker_backend, SandboxSpec(image=ensure_image("terminal"))
    from gymfleet.envs.sandbox.local import LocalBackend, LocalBackendConfig

    local = LocalBackend(LocalBackendConfig(state_dir=tmp, allow_unisolated=False))
    return (local, SandboxSpec()) if local.available() else None


async def _measure(backend: SandboxBackend, spec: SandboxSpec, n: int, concurrent: int) -> dict[str, object]:
    with console.status(f"{backend.name}: {n} cold starts"):
        cold = await _cold(backend, spec, n)
    with console.status(f"{backend.name}: {n} warm-pool acquires"):
        pool = await _pool(backend, spec, n)
    with console.status(f"{backend.name}: {concurrent} sandboxes at once"):
        wall_s = await _concurrent(backend, spec, concurrent)
    serial_s = statistics.median(cold["start"]) + statistics.median(cold["exec"]) + statistics.median(cold["close"])
    await backend.gc(run_id=RUN_ID, expired_only=False)
    return {
        "cold_start_ms_p50": _ms(cold["start"], 0.5),
        "cold_start_ms_p95": _ms(cold["start"], 0.95),
        "close_ms_p50": _ms(cold["close"], 0.5),
        "warm_pool_acquire_ms_p50": _ms(pool["acquire"], 0.5),
        "warm_pool_acquire_ms_p95": _ms(pool["acquire"], 0.95),
        "warm_pool_release_reset_ms_p50": _ms(pool["release"], 0.5),
        "exec_roundtrip_ms_p50": _ms(cold["exec"], 0.5),
        "exec_roundtrip_ms_p95": _ms(cold["exec"], 0.95),
        f"concurrent_{concurrent}_wall_s": round(wall_s, 2),
        f"concurrent_{concurrent}_serial_estimate_s": round(serial_s * concurrent, 2),
        "concurrency_speedup": round(serial_s * concurrent / wall_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="cold starts and pool acquires to time")
    parser.add_argument("--concurrent", type=int, default=64, help="sandboxes run at once")
    parser.add_argument("--backends", default="docker,local", help="comma-separated backend names")
    args = parser.parse_args()
    host = []
    for _ in range(50):
        t = time.perf_counter()
        subprocess.run(["bash", "-c", "true"], check=True)
        host.append(time.perf_counter() - t)
    report: dict[str, object] = {
        "benchmark": "sandbox",
        "n": args.n,
        "cpus": os.cpu_count(),
        "host_bash_true_ms_p50": _ms(host, 0.5),
        "load_average_1m_at_start": round(os.getloadavg()[0], 1),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.backends.split(","):
            made = _backend(name, Path(tmp))
            if made is None:
                report[name] = "not available here"
                continue
            report[name] = asyncio.run(_measure(*made, args.n, args.concurrent))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
