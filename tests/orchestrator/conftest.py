"""Fixtures of the orchestrator tests: ONE load of the embedded model per test session."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gymfleet.orchestrator.engines.model_loading import ModelSource, load_model, load_tokenizer


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
