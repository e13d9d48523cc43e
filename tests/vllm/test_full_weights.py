"""A real vLLM server serves a full-weight version (``learner.adapter: none``): the version is
written by the learner's own save (:class:`~gymfleet.trainer.weights.FullWeights`) into a bucket,
copied to the replica's folder with its SHA-256 checked, and reloaded in place through vLLM's
dev-mode routes; the server's logprobs are then those of the new weights, and reloading the base
folder restores them (the server is shared with the other tests of this folder)."""

from __future__ import annotations

import copy
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from gymfleet.core.records import SamplingParams
from gymfleet.trainer.bucket import AdapterBucket
from gymfleet.trainer.learner_config import LearnerConfig
from gymfleet.trainer.weights import FullWeights
from tests.vllm.conftest import client
from tests.vllm.test_client import _prompt, learner_logprobs

pytestmark = [pytest.mark.vllm, pytest.mark.model, pytest.mark.timeout(900)]
SAMPLING = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=12, seed=3)


def _changed(model: Any) -> Any:
    """A copy of ``model`` with every decoder layer's MLP output moved (seeded noise)."""
    changed = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in changed.model.layers:
            weight = layer.mlp.down_proj.weight
            weight.add_(0.02 * torch.randn(weight.shape, generator=generator))
    return changed


async def test_vllm_serves_a_published_full_weight_version(vllm_pool: Any, smollm_model: Any, smollm_tokenizer: Any,
                                                           tmp_path: Path) -> None:
    vllm_f32 = vllm_pool.servers("f32")[0]
    changed = _changed(smollm_model)
    bucket = AdapterBucket(str(tmp_path / "bucket"), "run")
    with tempfile.TemporaryDirectory() as tmp:
        FullWeights(changed, LearnerConfig(adapter="none")).save(Path(tmp))
        version = bucket.publish(1, Path(tmp), {"step": 1})
    prompt = _prompt(smollm_tokenizer, "Name three colours of the sea.")
    async with client(vllm_f32, adapter_dir=str(tmp_path / "replica")) as engine:
        base = await engine.generate(prompt, SAMPLING)
        t0 = time.monotonic()
        await engine.load_adapter("run-v000001", version.url)
        reload_s = time.monotonic() - t0
        try:
            served = await engine.generate(prompt, SAMPLING, adapter="run-v000001")
        finally:  # the base weights back, for the tests after this one
            await engine.load_adapter("base", vllm_f32.model_dir)
            restored = await engine.generate(prompt, SAMPLING)
    print(f"full-weight reload on vLLM: {reload_s:.2f} s")
    assert served.adapter_version == 1 and len(served.token_ids) > 2
    new = learner_logprobs(changed, prompt, served.token_ids, SAMPLING)
    old = learner_logprobs(smollm_model, prompt, served.token_ids, SAMPLING)
    assert float((new - torch.tensor(served.logprobs)).abs().max()) <= 1e-3
    assert float((old - torch.tensor(served.logprobs)).abs().max()) > 1e-2
    assert restored.token_ids == base.token_ids
    assert restored.logprobs == pytest.approx(base.logprobs, abs=1e-4)
    assert (tmp_path / "replica" / "run-v000001" / "model.safetensors").is_file()  # copied, checked
