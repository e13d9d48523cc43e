"""What sealing a sandbox for its verifier costs, per backend available here; prints JSON.

Per backend, over ``--n`` sandboxes that each left ``--daemons`` background processes running:
``stop_processes()`` p50/p95 (kill them all, checked by the backend), ``verifier()`` p50/p95 on an
untouched sandbox (the same sandbox), and, Docker only, ``verifier()`` p50/p95 after a command
changed a system file (a fresh container holding a copy of a workdir of ``--workdir-kb`` KiB, and
its removal). Docker only as well, Harbor's ``verifier(carry_changes=True)``: after a command wrote
``--system-kb`` KiB outside the workdir (``/srv``, carried), on the same sandbox (the layer read and
sorted on the host) and, when the command also replaced a tool (``/usr/bin/env``), in a fresh
container into which every other change is replayed. Baseline in the same run: one
``exec("true")`` round trip p50.

Usage: ``python benchmarks/verifier.py [--n 10] [--daemons 4] [--workdir-kb 256] [--system-kb 256] [--backends docker,local]``
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


CASES = {  # name: (command changing the system, carry_changes, a fresh verifier expected)
    "same": ("", False, False),
    "fresh": ("echo x > /usr/local/bin/changed", False, True),
    "carry_same": ("mkdir -p /srv && head -c {size} /dev/urandom > /srv/data.bin", True, False),
    "carry_fresh": ("mkdir -p /srv && head -c {size} /dev/urandom > /srv/data.bin && cp /bin/true /usr/bin/env", True, True),
}


async def _one(backend: SandboxBackend, spec: SandboxSpec, args: argparse.Namespace, case: str,
               times: dict[str, list[float]]) -> None:
    command, carry, fresh = CASES[case]
    async with backend.create(spec, SandboxLabels(run_id=RUN_ID)) as sb:
        await sb.exec(f"head -c {args.workdir_kb * 1024} /dev/urandom > data.bin; "
                      f"for i in $(seq {args.daemons}); do nohup sleep 600 >/dev/null 2>&1 & done")
        # untimed: wait until every daemon is sleep itself (on a loaded host one can still be mid-exec,
        # its command line empty, when stop_processes lists them)
        await sb.exec(f"for t in $(seq 200); do [ $(grep -lx sleep /proc/[0-9]*/comm 2>/dev/null | wc -l) "
                      f"-ge {args.daemons} ] && break; sleep 0.05; done")
        t = time.perf_counter()
        await sb.exec("true")
        times["exec"].append(time.perf_counter() - t)
        if command:
            assert (await sb.exec(command.format(size=args.system_kb * 1024))).ok
        t = time.perf_counter()
        killed = await sb.stop_processes()
        times["stop"].append(time.perf_counter() - t)
        assert len([c for c in killed if "sleep 600" in c]) == args.daemons, killed
        t = time.perf_counter()
        verifier = await sb.verifier(carry_changes=carry)
        if verifier is not sb:
            await verifier.close()
        times[case].append(time.perf_counter() - t)
        assert (verifier is not sb) == fresh, case


async def _measure(backend: SandboxBackend, spec: SandboxSpec, args: argparse.Namespace) -> dict[str, object]:
    times: dict[str, list[float]] = {"exec": [], "stop": [], **{case: [] for case in CASES}}
    fresh = backend.name == "docker"
    for _ in range(args.n):
        for case in CASES if fresh else ["same"]:
            await _one(backend, spec, args, case, times)
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
        for case in ("carry_same", "carry_fresh"):
            report[f"verifier_{case}_ms_p50"] = _ms(times[case], 0.5)
            report[f"verifier_{case}_ms_p95"] = _ms(times[case], 0.95)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10, help="sandboxes per case")
    parser.add_argument("--daemons", type=int, default=4, help="background processes each leaves")
    parser.add_argument("--workdir-kb", type=int, default=256, help="size of the workdir copied")
    parser.add_argument("--system-kb", type=int, default=256, help="size written outside the workdir (carried)")
    parser.add_argument("--backends", default="docker,local", help="comma-separated backend names")
    args = parser.parse_args()
    if args.n < 1 or args.daemons < 0 or args.workdir_kb < 0 or args.system_kb < 0:
        print("verifier.py: --n must be >= 1, --daemons, --workdir-kb and --system-kb >= 0", file=sys.stderr)
        raise SystemExit(2)
    report: dict[str, object] = {"benchmark": "verifier", "n": args.n, "daemons": args.daemons,
                                 "workdir_kb": args.workdir_kb, "system_kb": args.system_kb, "cpus": os.cpu_count(),
                                 "load_average_1m_at_start": round(os.getloadavg()[0], 1)}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.backends.split(","):
            made = _backend(name.strip(), Path(tmp))
            report[name] = asyncio.run(_measure(*made, args)) if made else "unavailable"
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
