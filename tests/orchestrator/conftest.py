"""Fixtures of the orchestrator tests: ONE load of the embedded model per test session."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gymfleet.core.models import ModelSpec, load_causal_lm, load_tokenizer


@pytest.fixture(scope="session")
def smollm_tokenizer() -> Any:
    """The embedded model's tokenizer (loaded once)."""
    return load_tokenizer(ModelSpec())


@pytest.fixture(scope="session")
def smollm_model() -> Any:
    """The embedded SmolLM2-135M model (loaded once; tests must not modify it: deepcopy first)."""
    return load_causal_lm(ModelSpec())


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


# ---- scheduler tests: a run config over the test envs (tests/orchestrator/fakes.py), a store ----

FAKES = "tests.orchestrator.fakes"


def task(name: str, env: str = "SlowEcho-v0", **fields: Any) -> dict[str, Any]:
    """A task entry over one of the test envs."""
    env_kwargs = fields.pop("env_kwargs", {})
    return {"name": name, "env_id": f"{FAKES}:gymfleet-test/{env}",
            "env_kwargs": {"n_instances": 6, "step_delay_s": 0.001, **env_kwargs},
            "group_size": 3, **fields}


def run_config(tmp_path: Path, tasks: list[dict[str, Any]], **fields: Any) -> Any:
    """A RunConfig writing under ``tmp_path``."""
    from gymfleet.orchestrator.config import RunConfig

    return RunConfig.model_validate({
        "run_id": "r1", "store": str(tmp_path / "store.db"), "metrics_path": str(tmp_path / "metrics.jsonl"),
        "max_in_flight": 8, "metrics_interval_s": 0.2, "tasks": tasks, **fields,
    })


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> Any:
    """A fresh SQLite TrajectoryStore under ``tmp_path``."""
    from gymfleet.orchestrator.store import TrajectoryStore

    async with await TrajectoryStore.open(str(tmp_path / "store.db")) as store:
        yield store
