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
from gymfleet.orchestrator.engines.limits import ReplicaLimits
from gymfleet.orchestrator.engines.vllm import VLLMEngine, VLLMEngineConfig
from gymfleet.orchestrator.router import Router, RouterConfig
from tests.orchestrator.fake_engine import FakeEngine
from tests.orchestrator.fake_http import fake_replica

pytestmark = pytest.mark.timeout(60)
SAMPLING = SamplingParams(max_new_tokens=4)


def client(url: str, timeout_s: float = 5.0) -> VLLMEngine:
    return VLLMEngine(VLLMEngineConfig(base_url=url, model="m"), limits=ReplicaLimits(request_timeout_s=timeout_s))


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


def test_an_engine_limit_key_points_to_the_router_that_owns_it() -> None:
    with pytest.raises(ValueError, match=r"timeout_s is not an engine setting: .* set policy.router.request_timeout_s"):
        VLLMEngineConfig(base_url="http://replica", model="m", timeout_s=120)
    with pytest.raises(ValueError, match=r"set policy.router.adapter_timeout_s"):
        VLLMEngineConfig(base_url="http://replica", model="m", adapter_timeout_s=120)


async def test_the_policys_http_replicas_use_the_routers_limits() -> None:
    """One owner: the gateway's HTTP replica clients time out where ``policy.router`` says (a
    replica that hangs fails after the router's 0.5 s, not an engine default of its own)."""
    from gymfleet.orchestrator.config import PolicyConfig
    from gymfleet.orchestrator.policy import open_gateway

    with fake_replica("hang") as url:
        cfg = PolicyConfig.model_validate({
            "engines": [{"kind": "vllm", "base_url": url, "model": "m", "name": "hangs"}],
            "router": {"request_timeout_s": 0.5, "adapter_timeout_s": 7.0, "health_timeout_s": 3.0},
            "parity": {"enabled": False}})
        async with open_gateway(cfg) as gateway:
            replica = gateway.engine.replicas["hangs"]
            assert replica.limits == cfg.router
            with pytest.raises(ReplicaTimeoutError):
                await replica.generate([1], SAMPLING)
