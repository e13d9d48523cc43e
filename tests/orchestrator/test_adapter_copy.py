"""Adapters on shared storage: the copy from the fsspec bucket to a replica's own disk before
``load_lora_adapter``, and the clear error when a replica is handed a URL it cannot read."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from gymfleet.orchestrator.engines.adapters import copy_adapter, is_remote
from gymfleet.orchestrator.engines.errors import AdapterError
from gymfleet.orchestrator.engines.vllm import VLLMEngine, VLLMEngineConfig
from gymfleet.trainer.bucket import AdapterBucket
from tests.orchestrator.fake_http import fake_replica


def _publish(tmp_path: Path, bucket_url: str) -> str:
    local = tmp_path / "trained"
    local.mkdir()
    (local / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    (local / "adapter_model.safetensors").write_bytes(b"weights")
    (local / "learner_state.pt").write_bytes(b"optimiser" * 1000)
    return AdapterBucket(bucket_url, "run").publish(1, local, {"step": 1}).url


def test_copies_only_the_adapter_files_across_filesystems(tmp_path: Path) -> None:
    url = _publish(tmp_path, "memory://bucket-copy")
    assert is_remote(url)
    copied = Path(copy_adapter(url, str(tmp_path / "replica-disk"), "run-v000001"))
    assert sorted(p.name for p in copied.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert (copied / "adapter_model.safetensors").read_bytes() == b"weights"


def test_a_folder_without_an_adapter_is_refused(tmp_path: Path) -> None:
    fsspec.filesystem("memory").pipe("/not-an-adapter/readme.txt", b"x")
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        copy_adapter("memory://not-an-adapter", str(tmp_path), "x")


async def test_engine_copies_to_its_adapter_dir_then_loads_the_copy(tmp_path: Path) -> None:
    url = _publish(tmp_path, "memory://bucket-engine")
    with fake_replica("vllm") as base_url:
        config = VLLMEngineConfig(base_url=base_url, model="m", adapter_dir=f"file://{tmp_path}/disk",
                                  adapter_dir_on_replica="/srv/adapters")
        async with VLLMEngine(config) as engine:
            await engine.load_adapter("run-v000001", url)
    assert (tmp_path / "disk" / "run-v000001" / "adapter_config.json").is_file()


async def test_a_remote_adapter_without_adapter_dir_is_a_clear_error(tmp_path: Path) -> None:
    url = _publish(tmp_path, "memory://bucket-remote")
    with fake_replica("vllm") as base_url:
        async with VLLMEngine(VLLMEngineConfig(base_url=base_url, model="m")) as engine:
            with pytest.raises(AdapterError, match="set adapter_dir"):
                await engine.load_adapter("run-v000001", url)
