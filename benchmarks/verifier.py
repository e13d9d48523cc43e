"""What sealing a sandbox for its verifier costs, per backend available here; prints JSON.

Per backend, over ``--n`` sandboxes that each left ``--daemons`` background processes running:
``stop_processes()`` p50/p95 (kill them all, checked by the backend), ``verifier()`` p50/p95 on an
untouched sandbox (the same sandbox), and, Docker only, ``verifier()`` p50/p95 after a command
changed a system file (a fresh container holding a copy of a workdir of ``--workdir-kb`` KiB, and
its removal). Baseline in the same run: one ``exec("true")`` round trip p50.

Usage: ``python benchmarks/verifier.py [--n 10] [--daemons 4] [--workdir-kb 256] [--backends docker,local]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sandbox import _backend, _ms  # noqa: E402 - the same backends and quantiles as sandbox.py

from gymfleet.envs.sandbox.base import SandboxBackend, SandboxLabels, SandboxSpec  # noqa: E402

RUN_ID = f"bench-verifier-{os.getpid()}"


async def _one(backend: SandboxBackend, spec: SandboxSpec, daemons: int, workdir_kb: int,
               touch_system: bool, times: dict[str, list[float]]) -> None:
    async with backend.create(spec, SandboxLabels(run_id=RUN_ID)) as sb:
        await sb.exec(f"head -c {workdir_kb * 1024} /dev/urandom > data.bin; "
                      f"for i in $(seq {daemons}); do nohup sleep 600 >/dev/null 2>&1 & done")
        t = time.perf_counter()
        await sb.exec("true")
        times["exec"].append(time.perf_counter() - t)
        if touch_system:
            await sb.exec("echo x > /usr/local/bin/changed")
        t = time.perf_counter()
        killed = await sb.stop_processes()
        times["stop"].append(time.perf_counter() - t)
        assert len([c for c in killed if "sleep 600" in c]) == daemons, killed
        t = time.perf_counter()
        verifier = await sb.verifier()
        if verifier is not sb:
            await verifier.close()
        times["fresh" if touch_system else "same"].append(time.perf_counter() - t)
        assert (verifier is not sb) == touch_system


async def _measure(backend: SandboxBackend, spec: SandboxSpec, args: argparse.Namespace) -> dict[str, object]:
    times: dict[str, list[float]] = {"exec": [], "stop": [], "same": [], "fresh": []}
    fresh = backend.name == "docker"
    for _ in range(args.n):
        await _one(backend, spec, args.daemons, args.workdir_kb, False, times)
        if fresh:
            await _one(backend, spec, args.daemons, args.workdir_kb, True, times)
    await backend.gc(run_id=RUN_ID, expired_only=False)
    report: dict[str, object] = {
        "exec_roundtrip_ms_p50": _ms(times["exec"], 0.5),
        "stop_processes_ms_p50": _ms(times["stop"], 0.5),
        "stop_processes_ms_p95": _ms(times["stop"], 0.95),
        "verifier_same_sandbox_ms_p50": _ms(times["same"], 0.5),
        "verifier_same_sandbox_ms_p95": _ms(times["same"], 0.95),
    }
    if fresh:
        report["verifier_fresh_container_ms_p50"] = _ms(times["fresh"], 0.5)
        report["verifier_fresh_container_ms_p95"] = _ms(times["fresh"], 0.95)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10, help="sandboxes per case")
    parser.add_argument("--daemons", type=int, default=4, help="background processes each leaves")
    parser.add_argument("--workdir-kb", type=int, default=256, help="size of the workdir copied")
    parser.add_argument("--backends", default="docker,local", help="comma-separated backend names")
    args = parser.parse_args()
    if args.n < 1 or args.daemons < 0 or args.workdir_kb < 0:
        print("verifier.py: --n must be >= 1, --daemons and --workdir-kb >= 0", file=sys.stderr)
        raise SystemExit(2)
    report: dict[str, object] = {"benchmark": "verifier", "n": args.n, "daemons": args.daemons,
                                 "workdir_kb": args.workdir_kb, "cpus": os.cpu_count(),
                                 "load_average_1m_at_start": round(os.getloadavg()[0], 1)}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.backends.split(","):
            made = _backend(name.strip(), Path(tmp))
            report[name] = asyncio.run(_measure(*made, args)) if made else "unavailable"
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
