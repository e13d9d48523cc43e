"""Routing and engine figures, as JSON: prefill saved by consistent hashing, batching speed-up, adapter load time.

What runs: four in-process TransformersEngine replicas of the embedded SmolLM2-135M (CPU,
float32; they share one copy of the weights but each has its own batcher, worker thread and
session KV caches). 64 rollouts of 8 turns go through the TITO gateway twice: once over the
consistent-hash Router, once over a round-robin baseline; the figure is the number of prompt
tokens actually prefilled (prompt tokens minus those served from a session cache). Then one
engine generates 16 requests one at a time and then all at once (batched). Then a LoRA adapter
(r=8 on q/v) is loaded into a fresh copy of the model three times.

Usage: python benchmarks/routing.py [--rollouts 64 --turns 8 --replicas 4]
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

    def __init__(self, replicas: list[TransformersEngine]) -> None:
        self.replicas = itertools.cycle(replicas)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None,
                       routing_key: str | None = None) -> Generation:
        return await next(self.replicas).generate(prompt_ids, sampling, adapter, routing_key)

    async def load_adapter(self, name: str, path: str) -> None: ...

    async def unload_adapter(self, name: str) -> None: ...

    async def health(self) -> bool:
        return True


async def prefilled_tokens(gateway: Gateway, n_rollouts: int, n_turns: int, progress: Progress, label: str) -> dict[str, int]:
    task = progress.add_task(label, total=n_rollouts * n_turns)

    async def rollout(i: int) -> list[Generation]:
        session = gateway.open_session(f"{label}-{i}", [Message("system", "You are an agent."), Message("user", f"Task {i}: fix the bug.")])
        for turn in range(n_turns):
            await session.generate(TURN.model_copy(update={"seed": i * 100 + turn}))
            session.add_message("tool", f"Observation {turn}: exit code 0, 3 files changed.")
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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--parts", default="routing,batching,adapters", help="comma-separated subset to run")
    args = parser.parse_args()
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
