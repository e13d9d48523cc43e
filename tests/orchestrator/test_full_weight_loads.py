"""Full-weight versions (``learner.adapter: none``) as replicas see them, without a model: told
apart from LoRA adapters, copied with their SHA-256 checked, and hot-loaded on a vLLM replica
through pause / reload_weights / reset_prefix_cache / resume (an httpx MockTransport replica;
``tests/vllm/test_full_weights.py`` does it on a real server)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import save_file

from gymfleet.core.records import SamplingParams
from gymfleet.orchestrator.engines.adapters import copy_adapter, is_full_weights
from gymfleet.orchestrator.engines.errors import AdapterError
from gymfleet.orchestrator.engines.vllm import VLLMEngine, VLLMEngineConfig
from gymfleet.orchestrator.engines.vllm_launcher import VLLMServerConfig, server_env
from gymfleet.trainer.bucket import AdapterBucket

COMPLETION = {"choices": [{"logprobs": {"tokens": ["token_id:7"], "token_logprobs": [-0.3]}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 2}}


def _version(tmp_path: Path) -> str:
    """A bucket version holding full weights (and the learner state a replica must not copy)."""
    folder = tmp_path / "made"
    folder.mkdir()
    save_file({"w": torch.arange(6.0)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "learner_state.safetensors").write_bytes(b"not for replicas")
    return AdapterBucket(str(tmp_path / "bucket"), "run").publish(3, folder, {}).url


def test_full_weights_are_told_apart_and_copied_with_their_sha256_checked(tmp_path: Path) -> None:
    url = _version(tmp_path)
    assert is_full_weights(url) and not is_full_weights(str(tmp_path / "made" / "nothing"))
    copied = Path(copy_adapter(url, str(tmp_path / "replica"), "run-v000003"))
    assert sorted(p.name for p in copied.iterdir()) == ["config.json", "model.safetensors"]
    weights = Path(url) / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="SHA-256"):
        copy_adapter(url, str(tmp_path / "replica"), "again")
    assert not (tmp_path / "replica" / "again").exists()


def _engine(calls: list[tuple[str, str, dict]], statuses: dict[str, int]) -> VLLMEngine:
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        calls.append((request.url.path, str(request.url.query, "ascii"), body))
        status = statuses.get(request.url.path, 200)
        if request.url.path == "/v1/completions":
            return httpx.Response(status, json=COMPLETION)
        if request.url.path == "/reset_prefix_cache":
            return httpx.Response(status, json={"success": True})
        return httpx.Response(status, json={"message": "no such route" if status == 404 else "ok"})

    return VLLMEngine(VLLMEngineConfig(base_url="http://replica", model="m"), transport=httpx.MockTransport(handle))


async def test_vllm_reloads_full_weights_paused_then_serves_them_under_the_base_name(tmp_path: Path) -> None:
    url = _version(tmp_path)
    calls: list[tuple[str, str, dict]] = []
    async with _engine(calls, {}) as engine:
        await engine.load_adapter("run-v000003", url)
        assert [c[0] for c in calls] == ["/pause", "/collective_rpc", "/reset_prefix_cache", "/resume"]
        assert calls[0][1] == "mode=wait"
        assert calls[1][2] == {"method": "reload_weights", "kwargs": {"weights_path": url}}
        generation = await engine.generate([1, 2], SamplingParams(max_new_tokens=1), adapter="run-v000003")
        assert calls[-1][2]["model"] == "m" and generation.adapter_version == 3
        await engine.unload_adapter("run-v000003")  # forgotten; the server keeps the newest weights
        assert calls[-1][0] == "/v1/completions"


async def test_a_server_without_dev_mode_or_a_failed_reload_is_one_clear_error_and_resumes(tmp_path: Path) -> None:
    url = _version(tmp_path)
    async with _engine([], {"/pause": 404}) as engine:
        with pytest.raises(AdapterError, match="VLLM_SERVER_DEV_MODE=1"):
            await engine.load_adapter("run-v000003", url)
    calls: list[tuple[str, str, dict]] = []
    async with _engine(calls, {"/collective_rpc": 500}) as engine:
        with pytest.raises(AdapterError, match="reloading weights"):
            await engine.load_adapter("run-v000003", url)
    assert calls[-1][0] == "/resume"
    assert server_env(VLLMServerConfig(full_weights=True), 0, {})["VLLM_SERVER_DEV_MODE"] == "1"
    assert "VLLM_SERVER_DEV_MODE" not in server_env(VLLMServerConfig(), 0, {})
