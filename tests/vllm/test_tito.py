"""A 3-turn TITO conversation on a real vLLM server, under a hot-loaded adapter: the stored token
ids are bit-exactly what vLLM generated plus the template's tokens, each turn's prompt extends
the last one, and the learner's logprobs of the whole trajectory match vLLM's within 1e-3."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gymfleet.core.sampling import token_logprobs
from gymfleet.orchestrator.gateway import Gateway, GatewayConfig
from gymfleet.core.records import Message, SamplingParams
from gymfleet.orchestrator.router import Router
from tests.orchestrator.fake_engine import RecordingEngine
from tests.vllm.conftest import client

pytestmark = [pytest.mark.vllm, pytest.mark.model, pytest.mark.timeout(900)]
# top_p=1: with a nucleus, float32 noise can move the boundary token to the other side in the
# learner (one CI run: 1.29e-3 on one of 60 tokens at top_p=0.95; see docs/vllm.md);
# this test bounds the numerical gap itself.
SAMPLING = SamplingParams(temperature=0.8, top_p=1.0, max_new_tokens=20)


async def test_three_turns_are_bit_exact_and_match_the_learner(vllm_f32: Any, smollm_model: Any, smollm_tokenizer: Any,
                                                               lora_dirs: list[Path]) -> None:
    from peft import PeftModel

    async with client(vllm_f32) as engine:
        recording = RecordingEngine(engine)
        async with Router([recording]) as router:
            gateway = Gateway(smollm_tokenizer, router, GatewayConfig(run_id="tito"))
            await gateway.publish_adapter(1, str(lora_dirs[0]))
            session = gateway.open_session("rollout-1", [Message("system", "You are a terminal agent."),
                                                         Message("user", "List the files, then count them.")])
            for turn in range(3):
                await session.generate(SAMPLING.model_copy(update={"seed": 10 + turn}))
                session.add_message("tool", f"observation {turn}: 3 files, exit code 0")
            await router.unload_adapter("tito-v000001")
    trajectory = session.to_trajectory("run", "g", "env", "i")
    ids, mask = trajectory.token_ids.tolist(), trajectory.loss_mask.astype(bool)

    generated = [t for g in session.generations for t in g.token_ids]
    assert [t for t, m in zip(ids, mask) if m] == generated  # vLLM's ids, untouched
    for before, gen, after in zip(recording.prompts, session.generations, recording.prompts[1:]):
        assert after[: len(before) + len(gen.token_ids)] == before + gen.token_ids  # each prompt extends the last
    assert ids[: len(recording.prompts[-1])] == recording.prompts[-1]
    assert set(trajectory.versions[mask].tolist()) == {1} and set(trajectory.versions[~mask].tolist()) == {-1}
    assert all(g.n_cached_tokens % 128 == 0 for g in session.generations)

    learner = PeftModel.from_pretrained(copy.deepcopy(smollm_model), str(lora_dirs[0])).eval()
    with torch.no_grad():
        logits = learner(input_ids=torch.tensor([ids])).logits[0, :-1]
    scored = token_logprobs(logits, torch.tensor(ids[1:]), SAMPLING.temperature, SAMPLING.top_p).numpy()
    delta = np.abs(scored[mask[1:]] - trajectory.logprobs[mask])
    assert mask.sum() > 20 and delta.max() <= 1e-3, delta.max()
