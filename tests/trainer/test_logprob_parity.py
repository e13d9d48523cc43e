"""The learner's logprobs are the engine's: an unchanged policy gives importance ratios of 1."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gymfleet.core.records import SamplingParams
from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine, TransformersEngineConfig
from gymfleet.trainer.bucket import AdapterBucket
from gymfleet.trainer.learner import Learner, LearnerConfig, sequence_logprobs
from gymfleet.trainer.rollout_policy import RolloutPolicy

pytestmark = pytest.mark.model


class _NoGroups:
    async def claim_groups(self, n: int, claimer: str, lease_s: float) -> list:
        return []

    async def ack_groups(self, group_ids: list[str], claimer: str) -> None:
        return None


@pytest.mark.parametrize(("temperature", "top_p"), [(0.7, 0.9), (1.0, 1.0)])
async def test_ratio_is_one_on_a_real_engine_generation(tmp_path, temperature: float, top_p: float) -> None:
    async with TransformersEngine(TransformersEngineConfig()) as engine:
        text = engine.tokenizer.apply_chat_template(
            [{"role": "user", "content": "Name three colours."}], add_generation_prompt=True, tokenize=False
        )
        prompt = list(engine.tokenizer(text).input_ids)
        gen = await engine.generate(prompt, SamplingParams(temperature=temperature, top_p=top_p,
                                                           max_new_tokens=24, seed=3))
    assert len(gen.token_ids) > 4
    policy = RolloutPolicy(temperature=temperature, top_p=top_p)
    learner = Learner(LearnerConfig(lora_rank=1), policy, _NoGroups(), AdapterBucket(str(tmp_path), "run"))
    ids = torch.tensor([prompt + gen.token_ids])
    with torch.no_grad():
        logp = sequence_logprobs(learner.model, ids, torch.ones_like(ids), temperature, top_p)[0, len(prompt):]
    ratio = torch.exp(logp - torch.tensor(gen.logprobs)).numpy()
    band = (ratio > 1 - learner.config.eps_low) & (ratio < 1 + learner.config.eps_high)
    assert float(np.mean(ratio)) == pytest.approx(1.0, abs=0.02), ratio
    assert 1.0 - float(np.mean(band)) == 0.0  # masked fraction at step 0
