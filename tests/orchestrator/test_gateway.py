"""TITO through the gateway with the real model: token ids, loss mask and logprobs line up exactly."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from gymfleet.core.sampling import token_logprobs
from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine, TransformersEngineConfig
from gymfleet.orchestrator.gateway import Gateway, GatewayConfig
from gymfleet.orchestrator.protocols import PolicyGateway, PolicySession
from gymfleet.core.records import Generation, Message, SamplingParams
from tests.orchestrator.fake_engine import FakeEngine, RecordingEngine

pytestmark = [pytest.mark.model, pytest.mark.timeout(300)]


async def test_multi_turn_tito_matches_engine_token_by_token(smollm_model: Any, smollm_tokenizer: Any) -> None:
    async with TransformersEngine(TransformersEngineConfig(), smollm_model, smollm_tokenizer) as engine:
        recorder = RecordingEngine(engine)
        gateway = Gateway(smollm_tokenizer, recorder)
        assert isinstance(gateway, PolicyGateway)
        session = gateway.open_session("rollout-1", [Message("system", "Answer briefly."), Message("user", "Say hi.")])
        assert isinstance(session, PolicySession)
        sampling = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=8, seed=11)
        turn_ends = []
        for observation in ["Now say bye.", "Thanks."]:
            await session.generate(sampling)
            turn_ends.append(len(session.token_ids))
            session.add_message("tool" if observation.startswith("Now") else "user", observation)
        await session.generate(sampling)
        trajectory = session.to_trajectory("run", "group", "gymfleet/Echo-v0", "i0")

    generations = session.generations
    assert len(generations) == len(recorder.prompts) == 3
    ids = trajectory.token_ids.tolist()
    for n, (prompt, generation) in enumerate(zip(recorder.prompts, generations)):
        # previous turns are a bit-exact prefix of this turn's prompt
        if n:
            assert prompt[: turn_ends[n - 1]] == ids[: turn_ends[n - 1]]
        assert ids[: len(prompt)] == prompt
        span = slice(len(prompt), len(prompt) + len(generation.token_ids))
        assert ids[span] == generation.token_ids
        assert trajectory.loss_mask[span].tolist() == [1] * len(generation.token_ids)
        assert trajectory.logprobs[span].tolist() == pytest.approx(generation.logprobs, abs=0)
        assert (trajectory.versions[span] == 0).all()
    assert trajectory.n_generated_tokens == sum(len(g.token_ids) for g in generations)
    assert (trajectory.logprobs[trajectory.loss_mask == 0] == 0).all()
    assert (trajectory.versions[trajectory.loss_mask == 0] == -1).all()
    # the session's KV cache served the earlier turns: only new tokens were prefilled
    for n in (1, 2):
        previous = recorder.prompts[n - 1] + generations[n - 1].token_ids
        assert generations[n].n_cached_tokens == len(previous) - 1  # all but the last sampled token
    # the learner's function on a fresh full forward pass gives the engine's logprobs
    with torch.no_grad():
        logits = smollm_model(torch.tensor([ids])).logits[0]
    mask = torch.from_numpy(trajectory.loss_mask.astype(bool))
    positions = torch.nonzero(mask).squeeze(1)
    learner = token_logprobs(logits[positions - 1], torch.tensor(ids)[positions], 0.8, 0.95)
    assert torch.allclose(learner, torch.from_numpy(trajectory.logprobs)[positions], atol=2e-3)


class GatedEngine(FakeEngine):
    """A FakeEngine whose generate waits until the test opens the gate (a turn in flight)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.gate = asyncio.Event()
        self.unloaded: list[str] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None,
                       routing_key: str | None = None) -> Generation:
        await self.gate.wait()
        return await super().generate(prompt_ids, sampling, adapter, routing_key)

    async def unload_adapter(self, name: str) -> None:
        await super().unload_adapter(name)
        self.unloaded.append(name)


async def test_a_retired_version_stays_loaded_until_its_turns_in_flight_end(smollm_tokenizer: Any) -> None:
    engine = GatedEngine("r0")
    gateway = Gateway(smollm_tokenizer, engine, GatewayConfig(keep_versions=2))
    await gateway.publish_adapter(1, "/a1")
    session = gateway.open_session("rollout-1", [Message("user", "Say hi.")])
    turn = asyncio.ensure_future(session.generate(SamplingParams(max_new_tokens=2)))
    await asyncio.sleep(0)  # the turn leased v1 and waits in the engine
    await gateway.publish_adapter(2, "/a2")
    await gateway.publish_adapter(3, "/a3")  # v1 is past keep_versions but still sampled
    assert engine.unloaded == [] and "run-v000001" in engine.adapters
    engine.gate.set()
    await turn
    assert session.generations[-1].adapter_version == 1  # the turn ran on the version it leased
    assert engine.unloaded == ["run-v000001"]
    await gateway.publish_adapter(4, "/a4")  # no turn holds v2: unloaded at once
    assert engine.unloaded == ["run-v000001", "run-v000002"]
    assert engine.adapters == {"run-v000003", "run-v000004"}


async def test_each_turn_renders_the_template_three_times_not_six(smollm_tokenizer: Any) -> None:
    """A turn's deltas (generation prompt, turn end, the env's reply) need three distinct renders;
    the session renders each once, and its ids equal the deltas computed without its memo."""
    gateway = Gateway(smollm_tokenizer, FakeEngine("r0"))
    first = [Message("system", "Be brief."), Message("user", "Hi")]
    session = gateway.open_session("run/t/0/i/0", first)
    gateway.template.n_renders = 0
    for turn in range(3):
        await session.generate(SamplingParams(max_new_tokens=4))
        session.add_message("user", f"more {turn}")
    assert gateway.template.n_renders == 3 * 3

    template, messages = gateway.template, list(first)  # the same deltas, each render done afresh
    ids = template.encode(template.render(messages))
    for turn in range(3):
        ids += template.encode(template.generation_prompt(messages)) + [7, 8]
        content = template.decode([7, 8])
        ids += template.encode(template.turn_end(messages, content, ended_with_eos=8 == template.eos_id))
        messages.append(Message("assistant", content))
        ids += template.encode(template.message_delta(messages, Message("user", f"more {turn}")))
        messages.append(Message("user", f"more {turn}"))
    assert session.token_ids == ids and session.messages == messages
