"""VLLMEngine against tiny fake HTTP replicas: parsing, every status checked, timeouts."""

from __future__ import annotations

import socket

import pytest

from gymfleet.core.records import SamplingParams
from gymfleet.orchestrator.engines.errors import (
    ReplicaServerError,
    ReplicaTimeoutError,
    ReplicaUnavailableError,
    UnknownAdapterError,
)
from gymfleet.orchestrator.engines.vllm import VLLMEngine, VLLMEngineConfig
from gymfleet.orchestrator.router import Router, RouterConfig
from tests.orchestrator.fake_engine import FakeEngine
from tests.orchestrator.fake_http import fake_replica

pytestmark = pytest.mark.timeout(60)
SAMPLING = SamplingParams(max_new_tokens=4)


def client(url: str, timeout_s: float = 5.0) -> VLLMEngine:
    return VLLMEngine(VLLMEngineConfig(base_url=url, model="m", timeout_s=timeout_s))


async def test_parses_token_ids_logprobs_and_cached_tokens() -> None:
    with fake_replica("vllm") as url:
        async with client(url) as engine:
            generation = await engine.generate([1, 2, 3], SAMPLING, adapter="run-v000004", routing_key="r")
            assert await engine.health()
    assert generation.token_ids == [42, 2] and generation.logprobs == [-0.5, -0.1]
    assert generation.adapter_version == 4 and generation.n_cached_tokens == 1 and generation.finish_reason == "stop"


@pytest.mark.parametrize(
    ("mode", "error"),
    [("500", ReplicaServerError), ("404", UnknownAdapterError), ("garbage", ReplicaServerError), ("hang", ReplicaTimeoutError)],
)
async def test_each_bad_answer_is_a_clear_error(mode: str, error: type[Exception]) -> None:
    with fake_replica(mode) as url:
        async with client(url, timeout_s=0.5) as engine:
            with pytest.raises(error, match=url):
                await engine.generate([1], SAMPLING)


async def test_unreachable_replica_is_unavailable_and_unhealthy() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with client(f"http://127.0.0.1:{port}") as engine:
        with pytest.raises(ReplicaUnavailableError):
            await engine.generate([1], SAMPLING)
        assert not await engine.health()


@pytest.mark.parametrize("mode", ["500", "hang"])
async def test_router_retries_a_broken_http_replica_elsewhere(mode: str) -> None:
    with fake_replica(mode) as url:
        async with client(url, timeout_s=0.5) as broken:
            healthy = FakeEngine("healthy")
            router = Router([broken, healthy], RouterConfig())
            keys = [k for k in (f"k{i}" for i in range(50)) if router.replica_order(k)[0] == broken.name][:3]
            for key in keys:
                generation = await router.generate([1], SAMPLING, routing_key=key)
                assert generation.replica == "healthy"
            assert broken.name not in router.alive
