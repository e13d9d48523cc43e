"""The router over two real vLLM servers: an adapter broadcast that one replica refuses is rolled
back everywhere; one both accept is served by both; a rollout's turns stay on one replica, whose
prefix cache then serves them (vLLM's ``cached_tokens``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gymfleet.orchestrator.engines.errors import AdapterPublishError, UnknownAdapterError
from gymfleet.orchestrator.gateway import Gateway, GatewayConfig
from gymfleet.core.records import Message, SamplingParams
from gymfleet.orchestrator.router import Router
from tests.vllm.conftest import client

pytestmark = [pytest.mark.vllm, pytest.mark.model, pytest.mark.timeout(900)]
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=8, seed=1)


async def test_broadcast_refused_by_one_replica_is_rolled_back(vllm_pair: list[Any], lora_rank16: Path,
                                                               lora_dirs: list[Path]) -> None:
    wide, narrow = vllm_pair  # the second accepts LoRA rank <= 8
    async with client(wide, name="wide") as a, client(narrow, name="narrow") as b, Router([a, b]) as router:
        with pytest.raises(AdapterPublishError, match=r"1/2 replicas failed.*narrow.*rolled back on \['wide'\]"):
            await router.load_adapter("bc-v000001", str(lora_rank16))
        for engine in (a, b):  # served nowhere
            with pytest.raises(UnknownAdapterError):
                await engine.generate([1, 2, 3], SAMPLING, adapter="bc-v000001")
        assert "bc-v000001" not in router.published

        await router.load_adapter("bc-v000002", str(lora_dirs[0]))  # rank 4: both accept
        for engine in (a, b):
            generation = await engine.generate([1, 2, 3], SAMPLING, adapter="bc-v000002")
            assert generation.adapter_version == 2 and generation.token_ids
        await router.unload_adapter("bc-v000002")


async def test_turns_of_a_rollout_stay_on_one_replica_and_reuse_its_cache(vllm_pair: list[Any],
                                                                          smollm_tokenizer: Any) -> None:
    async with client(vllm_pair[0], name="a") as a, client(vllm_pair[1], name="b") as b, Router([a, b]) as router:
        gateway = Gateway(smollm_tokenizer, router, GatewayConfig(run_id="route"))
        sessions = []
        for i in range(6):
            session = gateway.open_session(f"rollout-{i}", [
                Message("system", "You are an agent. " + "Follow the rules of the house carefully. " * 12),
                Message("user", f"Task {i}: fix the failing test.")])
            for turn in range(3):
                await session.generate(SAMPLING.model_copy(update={"seed": i * 10 + turn}))
                session.add_message("tool", f"Observation {turn}: " + "ok " * 40)
            sessions.append(session)
    homes = {s.rollout_id: {g.replica for g in s.generations} for s in sessions}
    assert all(len(replicas) == 1 for replicas in homes.values()), homes
    assert {r for replicas in homes.values() for r in replicas} == {"a", "b"}  # both replicas used
    later = [g for s in sessions for g in s.generations[1:]]
    assert all(g.n_cached_tokens >= 128 and g.n_cached_tokens % 128 == 0 for g in later), [g.n_cached_tokens for g in later]
