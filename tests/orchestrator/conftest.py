"""Fixtures of the orchestrator tests: ONE load of the embedded model per test session, fakes."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from gymfleet.orchestrator.engines.errors import AdapterError, ReplicaServerError, UnknownAdapterError
from gymfleet.orchestrator.engines.adapters import adapter_version
from gymfleet.orchestrator.engines.model_loading import ModelSource, load_model, load_tokenizer
from gymfleet.orchestrator.records import Generation, SamplingParams


@pytest.fixture(scope="session")
def smollm_tokenizer() -> Any:
    """The embedded model's tokenizer (loaded once)."""
    return load_tokenizer(ModelSource())


@pytest.fixture(scope="session")
def smollm_model() -> Any:
    """The embedded SmolLM2-135M model (loaded once; tests must not modify it: deepcopy first)."""
    return load_model(ModelSource())


@pytest.fixture(scope="session")
def lora_dirs(smollm_model: Any, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two different, non-trivial LoRA adapters of the embedded model, saved as peft folders."""
    import torch
    from peft import LoraConfig, get_peft_model

    paths = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        config = LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        peft_model = get_peft_model(copy.deepcopy(smollm_model), config)
        path = tmp_path_factory.mktemp(f"lora{seed}")
        peft_model.save_pretrained(path)
        paths.append(path)
    return paths


class FakeEngine:
    """A scripted replica implementing the Engine Protocol, with switchable failure modes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.adapters: set[str] = set()
        self.healthy = True
        self.fail_requests = False
        self.hang = False
        self.fail_load = False
        self.hang_load = False
        self.calls: list[str | None] = []

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None, routing_key: str | None = None
    ) -> Generation:
        self.calls.append(routing_key)
        if self.hang:
            await asyncio.sleep(3600)
        if self.fail_requests:
            raise ReplicaServerError(f"{self.name}: HTTP 500")
        if adapter is not None and adapter not in self.adapters:
            raise UnknownAdapterError(adapter)
        return Generation([7, 8], [-0.5, -0.25], "stop", adapter_version(adapter), self.name, len(prompt_ids))

    async def load_adapter(self, name: str, path: str) -> None:
        if self.fail_load:
            raise AdapterError(f"{self.name}: cannot load {path}")
        self.adapters.add(name)
        if self.hang_load:  # loads, but answers too late
            await asyncio.sleep(3600)

    async def unload_adapter(self, name: str) -> None:
        if name not in self.adapters:
            raise UnknownAdapterError(name)
        self.adapters.discard(name)

    async def health(self) -> bool:
        return self.healthy
