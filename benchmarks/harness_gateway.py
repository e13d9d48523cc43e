"""HTTP gateway figures, as JSON: overhead per call, and harness sessions in flight vs Little's law.

The gateway is the real one (``orchestrator/http``: uvicorn + starlette, the three dialects, the
session tree, the TITO gateway over the embedded model's real tokenizer and chat template); the
engine is a stub (fixed reply ids after a fixed sleep), as the issue names, so that what is
measured is the gateway. The clients are shaped like a harness: each session sends its whole
history (system prompt with tools, user task, then assistant tool calls and tool results),
growing by one exchange per call, with the OpenAI Chat Completions body a harness sends
(aiohttp clients: httpx's connection pool, not the gateway, was the bottleneck at 1,000
connections in one process).

1. **Overhead per call** (``overhead``): one session at a time, ``--overhead-calls`` calls (10 per
   session) from an httpx client in this process, engine latency 0: the client's latency minus
   the engine's own time, p50/p99 in ms (the goal: p50 <= 2 ms on top of generation).
2. **Sessions in flight** (``concurrency``): ``--sessions`` sessions (1,000) in a client process of
   their own (a harness fleet; this process serves), each making ``--calls`` calls, engine
   latency ``--latency-ms`` and a harness tool time ``--think-ms`` after each reply. Little's
   law with N sessions in flight: throughput over the ideal throughput is a session's ideal time
   (its engine latencies plus its tool times) over its measured time, summed over sessions (goal
   >= 0.9). Two modes: ``lockstep`` (every session starts at once with fixed latency and tool
   time: 1,000 calls arrive in the same instant each cycle, the worst case) and ``staggered``
   (starts spread over one cycle, latency and tool time uniform in [0.5, 1.5] x their means, as
   a fleet of harnesses runs).

The server runs on the orchestrator's event loop (``--loop auto``: uvloop, ``orchestrator/loop.py``)
with uvicorn's httptools parser (``--http``); ``--loop asyncio --http h11`` measures the setup
before benchmarks/README.md's change.

Usage: python benchmarks/harness_gateway.py [--sessions 1000 --calls 6 --latency-ms 4000 --think-ms 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import statistics
import sys
import time
from typing import Any

from gymfleet.core.records import Generation, SamplingParams

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Execute a bash command",
                                           "parameters": {"type": "object",
                                                          "properties": {"command": {"type": "string"}},
                                                          "required": ["command"]}}}]
SYSTEM = "You are a helpful assistant that can interact with a computer. " * 8
REPLY = 'I will look.\n<tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call>'


class StubEngine:
    """An Engine Protocol stub: the same reply ids after ``latency_s``; records its own time."""

    name = "stub"

    def __init__(self, tokenizer: Any, latency_s: float, jitter: bool = False) -> None:
        self.ids = [*tokenizer.encode(REPLY, add_special_tokens=False), tokenizer.eos_token_id]
        self.latency_s = latency_s
        self.engine_s: list[float] = []
        self.by_session: dict[str, float] = {}
        self.rng = random.Random(0) if jitter else None

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None,
                       routing_key: str | None = None) -> Generation:
        t0 = time.perf_counter()
        latency_s = self.latency_s * (self.rng.uniform(0.5, 1.5) if self.rng else 1.0)
        if latency_s:
            await asyncio.sleep(latency_s)
        self.engine_s.append(time.perf_counter() - t0)
        key = routing_key or ""
        self.by_session[key] = self.by_session.get(key, 0.0) + latency_s
        return Generation(list(self.ids), [-0.1] * len(self.ids), "stop", 1, self.name, len(prompt_ids))

    async def load_adapter(self, name: str, path: str) -> None: ...
    async def unload_adapter(self, name: str) -> None: ...
    async def health(self) -> bool:
        return True


async def harness_session(client: Any, url: str, calls: int, think_s: float, latencies: list[float],
                          rng: random.Random | None = None) -> tuple[float, float]:
    """One harness (an aiohttp session's requests): history grows by the reply and a tool result per
    call. With ``rng``: starts after a uniform delay within one cycle, tool times uniform in
    [0.5, 1.5] x ``think_s``. Returns (seconds from its first call to its end, its tool seconds)."""
    if rng is not None:
        await asyncio.sleep(rng.uniform(0, 5 * think_s))
    start, thought = time.perf_counter(), 0.0
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": "Please solve this issue: list the files."}]
    for n in range(calls):
        t0 = time.perf_counter()
        async with client.post(f"{url}/chat/completions", json={"model": "m", "messages": messages, "tools": TOOLS}) as r:
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {await r.text()}")
            message = (await r.json())["choices"][0]["message"]
        latencies.append(time.perf_counter() - t0)
        messages.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls")})
        messages.append({"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                         "content": f"<returncode>0</returncode>\n<output>\nfile{n}.txt\n</output>"})
        pause = think_s * (rng.uniform(0.5, 1.5) if rng else 1.0)
        if pause:
            await asyncio.sleep(pause)
            thought += pause
    return time.perf_counter() - start, thought


def _client_process(urls: list[str], calls: int, think_s: float, stagger: bool, out: Any) -> None:
    import aiohttp

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=900)) as client:
            latencies: list[float] = []
            t0, cpu0 = time.perf_counter(), time.process_time()
            rngs = [random.Random(i) if stagger else None for i in range(len(urls))]
            spans = await asyncio.gather(*(harness_session(client, u, calls, think_s, latencies, r)
                                           for u, r in zip(urls, rngs)))
            out.put({"wall_s": time.perf_counter() - t0, "latencies": latencies, "spans": spans,
                     "client_cpu_s": time.process_time() - cpu0})

    asyncio.run(main())


async def overhead(tokenizer: Any, n_calls: int, http: str = "httptools") -> dict[str, Any]:
    import aiohttp

    from gymfleet.orchestrator.gateway import Gateway
    from gymfleet.orchestrator.http.server import HttpGateway, HttpGatewayConfig
    from gymfleet.orchestrator.http.tree import SessionRegistry

    engine = StubEngine(tokenizer, 0.0)
    registry = SessionRegistry(Gateway(tokenizer, engine))
    latencies: list[float] = []
    async with HttpGateway(registry, HttpGatewayConfig(http=http)) as server, aiohttp.ClientSession() as client:
        for _ in range(max(1, n_calls // 10)):
            await harness_session(client, server.base_url(registry.open("r")), 10, 0.0, latencies)
    over_ms = sorted((lat - eng) * 1e3 for lat, eng in zip(latencies, engine.engine_s))
    return {"calls": len(over_ms), "p50_ms": round(statistics.median(over_ms), 3),
            "p99_ms": round(over_ms[int(0.99 * (len(over_ms) - 1))], 3), "mean_ms": round(statistics.fmean(over_ms), 3)}


async def concurrency(tokenizer: Any, sessions: int, calls: int, latency_s: float, think_s: float,
                      stagger: bool, http: str = "httptools") -> dict[str, Any]:
    from gymfleet.orchestrator.gateway import Gateway
    from gymfleet.orchestrator.http.server import HttpGateway, HttpGatewayConfig
    from gymfleet.orchestrator.http.tree import SessionRegistry

    engine = StubEngine(tokenizer, latency_s, jitter=stagger)
    registry = SessionRegistry(Gateway(tokenizer, engine))
    async with HttpGateway(registry, HttpGatewayConfig(call_timeout_s=600, http=http)) as server:
        opened = [registry.open(f"r{i}") for i in range(sessions)]
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        proc = ctx.Process(target=_client_process, args=([server.base_url(s) for s in opened], calls, think_s, stagger, out))
        cpu0 = time.process_time()
        proc.start()
        result = await asyncio.to_thread(out.get)
        await asyncio.to_thread(proc.join)
        server_cpu_s = time.process_time() - cpu0
    # Little's law with N sessions fixed: throughput / ideal throughput = ideal session time / session time
    ideal_s = sum(engine.by_session[s.rollout_id] for s in opened) + sum(t for _, t in result["spans"])
    measured_s = sum(span for span, _ in result["spans"])
    lat = sorted(result["latencies"])
    continued = sum(s.metrics()["continued"] for s in opened)
    return {"mode": "staggered" if stagger else "lockstep", "sessions": sessions, "calls_per_session": calls,
            "latency_ms": latency_s * 1e3, "think_ms": think_s * 1e3, "wall_s": round(result["wall_s"], 2),
            "session_s_mean": round(measured_s / sessions, 3), "ideal_session_s_mean": round(ideal_s / sessions, 3),
            "fraction_of_littles_law_ideal": round(ideal_s / measured_s, 3),
            "calls_per_s": round(sessions * calls / result["wall_s"], 1),
            "client_latency_p50_ms": round(lat[len(lat) // 2] * 1e3, 1),
            "client_latency_p99_ms": round(lat[int(0.99 * (len(lat) - 1))] * 1e3, 1),
            "server_cpu_ms_per_call": round(server_cpu_s / (sessions * calls) * 1e3, 3),
            "client_cpu_ms_per_call": round(result["client_cpu_s"] / (sessions * calls) * 1e3, 3),
            "continued_calls": continued, "all_continued": continued == sessions * (calls - 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overhead-calls", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--latency-ms", type=float, default=4000)
    parser.add_argument("--think-ms", type=float, default=1000)
    parser.add_argument("--loop", choices=["auto", "asyncio"], default="auto",
                        help="the server's event loop: the orchestrator's (auto: uvloop, orchestrator/loop.py) or asyncio's")
    parser.add_argument("--http", choices=["httptools", "h11"], default="httptools", help="uvicorn's HTTP parser")
    args = parser.parse_args()
    from gymfleet.orchestrator.loop import run_loop

    from gymfleet.core.models import ModelSpec, load_tokenizer

    tokenizer = load_tokenizer(ModelSpec())
    print("overhead per call...", file=sys.stderr)
    over = run_loop(overhead(tokenizer, args.overhead_calls, args.http), args.loop)
    print(f"overhead: {json.dumps(over)}", file=sys.stderr)
    print(f"{args.sessions} sessions in flight...", file=sys.stderr)
    conc = [run_loop(concurrency(tokenizer, args.sessions, args.calls, args.latency_ms / 1e3, args.think_ms / 1e3,
                                 stagger, args.http), args.loop) for stagger in (False, True)]
    print(json.dumps({"overhead": over, "concurrency": conc, "loop": args.loop, "http": args.http,
                      "load_average": os.getloadavg(), "cpus": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
