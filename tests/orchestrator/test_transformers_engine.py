"""TransformersEngine with the real model: batching, session caches, adapters, bad input."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from gymfleet.core.records import SamplingParams
from gymfleet.orchestrator.engines.errors import AdapterError, ContextLengthError, UnknownAdapterError
from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine, TransformersEngineConfig
from gymfleet.orchestrator.protocols import Engine

pytestmark = [pytest.mark.model, pytest.mark.timeout(300)]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=6)


def prompt(tokenizer: Any, text: str) -> list[int]:
    chat = [{"role": "user", "content": text}]
    return list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)["input_ids"])


async def test_concurrent_requests_share_forward_passes(smollm_model: Any, smollm_tokenizer: Any) -> None:
    prompts = [prompt(smollm_tokenizer, t) for t in ["What is 2+2?", "Name a colour.", "Say a long sentence about cats."]]
    config = TransformersEngineConfig(batch_window_ms=50)
    async with TransformersEngine(config, smollm_model, smollm_tokenizer) as engine:
        assert isinstance(engine, Engine)
        alone = [await engine.generate(p, GREEDY) for p in prompts]
        passes_alone = engine.stats.n_forward_passes
        together = await asyncio.gather(*(engine.generate(p, GREEDY) for p in prompts))
        assert engine.stats.n_forward_passes - passes_alone <= max(len(g.token_ids) for g in together)
    for a, b in zip(alone, together):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-3)


async def test_next_turn_prefills_only_new_tokens(smollm_model: Any, smollm_tokenizer: Any) -> None:
    first = prompt(smollm_tokenizer, "Count to three.")
    async with TransformersEngine(TransformersEngineConfig(), smollm_model, smollm_tokenizer) as engine:
        g1 = await engine.generate(first, GREEDY, routing_key="s")
        second = first + g1.token_ids + smollm_tokenizer.encode("\n<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\n")
        g2 = await engine.generate(second, GREEDY, routing_key="s")
        assert g2.n_cached_tokens == len(first) + len(g1.token_ids) - 1
        # a different prompt under the same key drops the stale part of the cache
        g3 = await engine.generate(prompt(smollm_tokenizer, "Other."), GREEDY, routing_key="s")
        assert g3.n_cached_tokens < len(first)
    async with TransformersEngine(TransformersEngineConfig(max_cached_sessions=0), smollm_model, smollm_tokenizer) as cold:
        g2_cold = await cold.generate(second, GREEDY, routing_key="s")
    assert g2_cold.n_cached_tokens == 0 and g2_cold.token_ids == g2.token_ids


async def test_bad_input_is_a_clear_error(smollm_model: Any, smollm_tokenizer: Any) -> None:
    config = TransformersEngineConfig(max_context_tokens=32)
    async with TransformersEngine(config, smollm_model, smollm_tokenizer) as engine:
        with pytest.raises(ContextLengthError, match="context window of 32"):
            await engine.generate(list(range(100, 140)), GREEDY)
        with pytest.raises(UnknownAdapterError, match="not loaded"):
            await engine.generate([1, 2, 3], GREEDY, adapter="run-v000009")
        near_limit = await engine.generate(list(range(100, 130)), SamplingParams(temperature=0, max_new_tokens=16))
        assert len(near_limit.token_ids) <= 2


async def test_several_adapters_in_one_batch(smollm_model: Any, smollm_tokenizer: Any, lora_dirs: list[Path]) -> None:
    model = copy.deepcopy(smollm_model)  # peft injects layers in place: keep the shared model clean
    config = TransformersEngineConfig(batch_window_ms=50, max_adapters=2)
    p = prompt(smollm_tokenizer, "Tell me a fact.")
    async with TransformersEngine(config, model, smollm_tokenizer) as engine:
        base_before = await engine.generate(p, GREEDY)
        await engine.load_adapter("run-v000001", str(lora_dirs[0]))
        await engine.load_adapter("run-v000002", str(lora_dirs[1]))
        with pytest.raises(AdapterError, match="max_adapters"):
            await engine.load_adapter("run-v000003", str(lora_dirs[0]))
        names = [None, "run-v000001", "run-v000002"]
        alone = [await engine.generate(p, GREEDY, adapter=n) for n in names]
        passes = engine.stats.n_forward_passes
        mixed = await asyncio.gather(*(engine.generate(p, GREEDY, adapter=n) for n in names))
        assert engine.stats.n_forward_passes - passes <= GREEDY.max_new_tokens
        assert [g.adapter_version for g in mixed] == [0, 1, 2]
        assert alone[0].token_ids == base_before.token_ids
        assert alone[1].logprobs != pytest.approx(alone[0].logprobs, abs=1e-3)
        for a, b in zip(alone, mixed):
            assert a.token_ids == b.token_ids
        await engine.unload_adapter("run-v000001")
        with pytest.raises(UnknownAdapterError):
            await engine.generate(p, GREEDY, adapter="run-v000001")
        with pytest.raises(AdapterError, match="failed"):
            await engine.load_adapter("run-v000004", "/nonexistent/adapter")
        await engine.unload_adapter("run-v000002")  # the last one: back to the plain base model
        assert (await engine.generate(p, GREEDY)).token_ids == base_before.token_ids


async def test_a_request_whose_adapter_is_unloaded_while_it_waits_fails_alone(
    smollm_model: Any, smollm_tokenizer: Any, lora_dirs: list[Path]
) -> None:
    """The CI failure of 2026-12-02: a turn queued on v2, v4's publish unloaded v2 before the
    batch ran, and peft's ValueError took the only replica out of the ring."""
    model = copy.deepcopy(smollm_model)
    config = TransformersEngineConfig(batch_window_ms=2000)  # the unload lands well inside the window
    p = prompt(smollm_tokenizer, "Tell me a fact.")
    async with TransformersEngine(config, model, smollm_tokenizer) as engine:
        await engine.load_adapter("run-v000001", str(lora_dirs[0]))
        await engine.load_adapter("run-v000002", str(lora_dirs[1]))
        queued = [asyncio.ensure_future(engine.generate(p, GREEDY, adapter=a))
                  for a in ("run-v000001", "run-v000002", None)]
        await asyncio.sleep(0.1)  # all three passed the loaded check and wait in the batch window
        await engine.unload_adapter("run-v000001")
        gone, kept, base = await asyncio.gather(*queued, return_exceptions=True)
        assert isinstance(gone, UnknownAdapterError) and "was unloaded" in str(gone)
        assert kept.adapter_version == 2 and len(kept.token_ids) > 0
        assert base.adapter_version == 0 and len(base.token_ids) > 0
        assert await engine.health()


async def _after_passes(engine: TransformersEngine, n: int) -> None:
    while engine.stats.n_forward_passes < n:
        await asyncio.sleep(0.005)


async def test_a_request_joins_a_batch_that_is_decoding(smollm_model: Any, smollm_tokenizer: Any) -> None:
    """Continuous batching: a second turn with a cached prefix joins a long greedy decode midway,
    shares its decode passes, and both get the tokens they get alone; the joined row's session
    cache, cut out of the running batch, serves a third turn that matches a cold engine's."""
    long = SamplingParams(temperature=0.0, max_new_tokens=24)
    first = prompt(smollm_tokenizer, "Count to three.")
    story = prompt(smollm_tokenizer, "Write a long story about a dragon and a knight.")
    async with TransformersEngine(TransformersEngineConfig(), smollm_model, smollm_tokenizer) as engine:
        story_alone = await engine.generate(story, long)
        g1 = await engine.generate(first, GREEDY, routing_key="s")
        second = first + g1.token_ids + smollm_tokenizer.encode("\n<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\n")
        passes = engine.stats.n_forward_passes
        running = asyncio.ensure_future(engine.generate(story, long))
        await _after_passes(engine, passes + 4)
        g2 = await engine.generate(second, GREEDY, routing_key="s")
        story_joined = await running
        assert len(story_joined.token_ids) == 24 and story_joined.token_ids == story_alone.token_ids
        assert story_joined.logprobs == pytest.approx(story_alone.logprobs, abs=1e-3)
        # the join costs one prefill pass; its decodes ride on the story's passes
        assert engine.stats.n_forward_passes - passes <= 24 + 1
        assert g2.n_cached_tokens == len(first) + len(g1.token_ids) - 1
        third = second + g2.token_ids + smollm_tokenizer.encode("\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n")
        g3 = await engine.generate(third, GREEDY, routing_key="s")
        assert g3.n_cached_tokens == len(second) + len(g2.token_ids) - 1
    async with TransformersEngine(TransformersEngineConfig(max_cached_sessions=0), smollm_model, smollm_tokenizer) as cold:
        assert (await cold.generate(second, GREEDY)).token_ids == g2.token_ids
        g3_cold = await cold.generate(third, GREEDY)
    assert g3_cold.token_ids == g3.token_ids
    assert g3_cold.logprobs == pytest.approx(g3.logprobs, abs=1e-3)


async def test_a_groups_samples_share_one_prefill(smollm_model: Any, smollm_tokenizer: Any) -> None:
    """Four samples of one prompt arriving together prefill it once, and still draw their own tokens."""
    p = prompt(smollm_tokenizer, "Name an animal and say why you like it.")
    config = TransformersEngineConfig(batch_window_ms=200)
    async with TransformersEngine(config, smollm_model, smollm_tokenizer) as engine:
        samples = await asyncio.gather(*(
            engine.generate(p, SamplingParams(temperature=1.0, max_new_tokens=12, seed=seed)) for seed in range(4)
        ))
        assert engine.stats.n_prefilled_tokens == len(p) and engine.stats.n_batches == 1
        alone = await engine.generate(p, SamplingParams(temperature=1.0, max_new_tokens=12, seed=2))
    assert len({tuple(s.token_ids) for s in samples}) > 1
    assert alone.token_ids == samples[2].token_ids
    assert alone.logprobs == pytest.approx(samples[2].logprobs, abs=1e-3)


async def test_a_new_session_starts_from_a_prompt_another_sample_prefilled(smollm_model: Any, smollm_tokenizer: Any) -> None:
    """A group's later sample, arriving while the first decodes, reuses the first's prompt cache;
    a different task's prompt reuses only the system prompt they share; results match a cold engine."""
    def task_prompt(text: str) -> list[int]:
        chat = [{"role": "system", "content": "You work in a bash terminal."}, {"role": "user", "content": text}]
        return list(smollm_tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)["input_ids"])

    p, other = task_prompt("Copy apple.txt to backup.txt."), task_prompt("Delete river.txt.")
    shared = next(n for n, (a, b) in enumerate(zip(p, other)) if a != b)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=16, seed=5)
    async with TransformersEngine(TransformersEngineConfig(), smollm_model, smollm_tokenizer) as engine:
        first = asyncio.ensure_future(engine.generate(p, SamplingParams(temperature=0.0, max_new_tokens=16), routing_key="a"))
        await _after_passes(engine, 2)
        later = await engine.generate(p, sampling, routing_key="b")
        await first
        elsewhere = await engine.generate(other, sampling, routing_key="c")
    assert later.n_cached_tokens == len(p) - 1
    assert elsewhere.n_cached_tokens == shared
    async with TransformersEngine(TransformersEngineConfig(max_cached_sessions=0), smollm_model, smollm_tokenizer) as cold:
        later_cold = await cold.generate(p, sampling)
        elsewhere_cold = await cold.generate(other, sampling)
    assert later_cold.n_cached_tokens == 0
    assert later.token_ids == later_cold.token_ids and elsewhere.token_ids == elsewhere_cold.token_ids
    assert later.logprobs == pytest.approx(later_cold.logprobs, abs=1e-3)
