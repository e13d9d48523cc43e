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
   law: N sessions, each cycle ``latency + think``, give an ideal of ``calls x (latency + think)``
   seconds of wall time; the figure is ideal / measured (goal >= 0.9).

Usage: python benchmarks/harness_gateway.py [--sessions 1000 --calls 6 --latency-ms 4000 --think-ms 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
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

    def __init__(self, tokenizer: Any, latency_s: float) -> None:
        self.ids = [*tokenizer.encode(REPLY, add_special_tokens=False), tokenizer.eos_token_id]
        self.latency_s = latency_s
        self.engine_s: list[float] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None,
                       routing_key: str | None = None) -> Generation:
        t0 = time.perf_counter()
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        self.engine_s.append(time.perf_counter() - t0)
        return Generation(list(self.ids), [-0.1] * len(self.ids), "stop", 1, self.name, len(prompt_ids))

    async def load_adapter(self, name: str, path: str) -> None: ...
    async def unload_adapter(self, name: str) -> None: ...
    async def health(self) -> bool:
        return True


async def harness_session(client: Any, url: str, calls: int, think_s: float, latencies: list[float]) -> None:
    """One harness (an aiohttp session's requests): history grows by the reply and a tool result per call."""
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
        if think_s:
            await asyncio.sleep(think_s)


def _client_process(urls: list[str], calls: int, think_s: float, out: Any) -> None:
    import aiohttp

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=900)) as client:
            latencies: list[float] = []
            t0, cpu0 = time.perf_counter(), time.process_time()
            await asyncio.gather(*(harness_session(client, u, calls, think_s, latencies) for u in urls))
            out.put({"wall_s": time.perf_counter() - t0, "latencies": latencies,
                     "client_cpu_s": time.process_time() - cpu0})

    asyncio.run(main())


async def overhead(tokenizer: Any, n_calls: int) -> dict[str, Any]:
    import aiohttp

    from gymfleet.orchestrator.gateway import Gateway
    from gymfleet.orchestrator.http.server import HttpGateway
    from gymfleet.orchestrator.http.tree import SessionRegistry

    engine = StubEngine(tokenizer, 0.0)
    registry = SessionRegistry(Gateway(tokenizer, engine))
    latencies: list[float] = []
    async with HttpGateway(registry) as server, aiohttp.ClientSession() as client:
        for _ in range(max(1, n_calls // 10)):
            await harness_session(client, server.base_url(registry.open("r")), 10, 0.0, latencies)
    over_ms = sorted((lat - eng) * 1e3 for lat, eng in zip(latencies, engine.engine_s))
    return {"calls": len(over_ms), "p50_ms": round(statistics.median(over_ms), 3),
            "p99_ms": round(over_ms[int(0.99 * (len(over_ms) - 1))], 3), "mean_ms": round(statistics.fmean(over_ms), 3)}


async def concurrency(tokenizer: Any, sessions: int, calls: int, latency_s: float, think_s: float) -> dict[str, Any]:
    from gymfleet.orchestrator.gateway import Gateway
    from gymfleet.orchestrator.http.server import HttpGateway, HttpGatewayConfig
    from gymfleet.orchestrator.http.tree import SessionRegistry

    engine = StubEngine(tokenizer, latency_s)
    registry = SessionRegistry(Gateway(tokenizer, engine))
    async with HttpGateway(registry, HttpGatewayConfig(call_timeout_s=600)) as server:
        opened = [registry.open(f"r{i}") for i in range(sessions)]
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        proc = ctx.Process(target=_client_process, args=([server.base_url(s) for s in opened], calls, think_s, out))
        cpu0 = time.process_time()
        proc.start()
        result = await asyncio.to_thread(out.get)
        await asyncio.to_thread(proc.join)
        server_cpu_s = time.process_time() - cpu0
    ideal_s = calls * (latency_s + think_s)
    lat = sorted(result["latencies"])
    continued = sum(s.metrics()["continued"] for s in opened)
    return {"sessions": sessions, "calls_per_session": calls, "latency_ms": latency_s * 1e3, "think_ms": think_s * 1e3,
            "wall_s": round(result["wall_s"], 2), "ideal_wall_s": ideal_s,
            "fraction_of_littles_law_ideal": round(ideal_s / result["wall_s"], 3),
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
    args = parser.parse_args()
    from gymfleet.core.models import ModelSpec, load_tokenizer

    tokenizer = load_tokenizer(ModelSpec())
    print("overhead per call...", file=sys.stderr)
    over = asyncio.run(overhead(tokenizer, args.overhead_calls))
    print(f"overhead: {json.dumps(over)}", file=sys.stderr)
    print(f"{args.sessions} sessions in flight...", file=sys.stderr)
    conc = asyncio.run(concurrency(tokenizer, args.sessions, args.calls, args.latency_ms / 1e3, args.think_ms / 1e3))
    print(json.dumps({"overhead": over, "concurrency": conc, "load_average": os.getloadavg(),
                      "cpus": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
