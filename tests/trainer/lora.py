"""A LoRA model of the embedded model for gradient tests (shared by the trainer tests)."""

from __future__ import annotations

import copy
from typing import Any

import torch


def lora_model(smollm_model: Any) -> Any:
    """One non-trivial LoRA initialisation (B non-zero, so A gets a gradient too), on a deep copy
    of ``smollm_model`` (the session's, which tests must not modify)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(copy.deepcopy(smollm_model), LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    return model
