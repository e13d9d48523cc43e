"""Full fine-tuning (``learner.adapter: none``) on the real embedded model: the learner trains
every weight and publishes them as safetensors (checked by SHA-256 like an adapter), the in-process
engine serves the published version with the learner's own logprobs, and a resumed learner gets
the weights and optimiser state back and trains on. (A real vLLM server loading a published
version: ``tests/vllm/test_full_weights.py``.)"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gymfleet.core.records import SamplingParams
from gymfleet.orchestrator.engines.errors import AdapterError
from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine, TransformersEngineConfig
from gymfleet.trainer.bucket import AdapterBucket
from gymfleet.trainer.errors import BucketCorruptError
from gymfleet.trainer.model_card import export_version
from gymfleet.trainer.learner import Learner, LearnerConfig, sequence_logprobs
from gymfleet.trainer.rollout_policy import RolloutPolicy
from tests.trainer.test_learner import MemoryGroupSource, _traj, _with_behaviour_logprobs

pytestmark = [pytest.mark.model, pytest.mark.timeout(600)]
PROMPT = "<|im_start|>user\nSay a colour.<|im_end|>\n<|im_start|>assistant\n"
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=5)
NAME = "run-v000001"


def _logp(model: Any, ids: list[int], n_prompt: int) -> list[float]:
    t = torch.tensor([ids])
    with torch.no_grad():
        return sequence_logprobs(model, t, torch.ones_like(t))[0, n_prompt:].tolist()


async def test_full_weights_are_published_served_by_the_engine_and_resumed(
        smollm_model: Any, smollm_tokenizer: Any, tmp_path: Path) -> None:
    config = LearnerConfig(adapter="none", learning_rate=2e-5, groups_per_step=1, micro_batch_size=2)
    bucket = AdapterBucket(str(tmp_path / "bucket"), "run")
    source = MemoryGroupSource({})
    learner = Learner(config, RolloutPolicy(), source, bucket)
    assert sum(p.numel() for p in learner.weights.trainable()) == sum(p.numel() for p in smollm_model.parameters())
    source.groups = {gid: _with_behaviour_logprobs(learner.model, [
        _traj(smollm_tokenizer, gid, 0, PROMPT, "Blue.", 1.0),
        _traj(smollm_tokenizer, gid, 1, PROMPT, "I cannot do that.", 0.0)]) for gid in ("g0", "g1")}

    m = await learner.run_step()
    assert m is not None and m.published_version == 1 and np.isfinite(m.loss)
    version = bucket.get(1)
    files = version.meta["files"]
    assert {"config.json", "model.safetensors", "learner_state.safetensors", "README.md"} <= set(files)
    assert not any(name.startswith("adapter_") for name in files)
    weights_file = Path(version.url) / "model.safetensors"
    assert files["model.safetensors"]["sha256"] == hashlib.sha256(weights_file.read_bytes()).hexdigest()
    assert json.loads((Path(version.url) / "meta.json").read_text())["config"]["adapter"] == "none"

    # the in-process engine serves v1: the learner's logprobs, not the base model's
    prompt = list(smollm_tokenizer(PROMPT).input_ids)
    local = bucket.fetch(1, tmp_path / "replica", only_served=True)
    assert not (local / "learner_state.safetensors").exists()  # 2 x 538 MB a replica never reads
    async with TransformersEngine(TransformersEngineConfig(), copy.deepcopy(smollm_model), smollm_tokenizer) as engine:
        await engine.load_adapter(NAME, str(local))
        with pytest.raises(AdapterError, match="one kind per run"):  # no LoRA on full weights
            await engine.load_adapter("lora", str(tmp_path))
        served = await engine.generate(prompt, GREEDY, adapter=NAME)
        await engine.unload_adapter(NAME)
    assert served.adapter_version == 1 and served.token_ids
    ids = prompt + served.token_ids
    trained = _logp(learner.model, ids, len(prompt))
    base = _logp(smollm_model, ids, len(prompt))
    assert served.logprobs == pytest.approx(trained, abs=2e-3)
    assert max(abs(a - b) for a, b in zip(trained, base)) > 1e-2  # the step moved the weights

    embed = learner.model.get_input_embeddings().weight.detach().clone()
    exp_avg = learner.optimizer.state[learner.weights.trainable()[0]]["exp_avg"].clone()
    del learner, engine
    gc.collect()

    # a restarted learner resumes v1: weights, optimiser state and step, and trains the next group
    resumed = Learner(config, RolloutPolicy(), source, bucket, claimer="learner-2")
    assert await resumed.resume() and resumed.step == 1 and resumed.version == 1
    assert torch.equal(resumed.model.get_input_embeddings().weight, embed)
    assert torch.equal(resumed.optimizer.state[resumed.weights.trainable()[0]]["exp_avg"], exp_avg)
    m = await resumed.run_step()
    assert m is not None and m.step == 2 and m.published_version == 2 and source.acked == {"g0", "g1"}
    del resumed
    gc.collect()
    exported = export_version(bucket, 2, tmp_path / "export")  # a transformers folder and its card
    assert {"config.json", "model.safetensors", "README.md"} <= {p.name for p in exported.iterdir()}
    assert not (exported / "learner_state.safetensors").exists()

    # a byte flipped in the bucket (same size): the replica's fetch refuses it by SHA-256
    data = bytearray(weights_file.read_bytes())
    data[len(data) // 2] ^= 1
    weights_file.write_bytes(bytes(data))
    with pytest.raises(BucketCorruptError, match="SHA-256"):
        bucket.fetch(1, tmp_path / "replica2")
