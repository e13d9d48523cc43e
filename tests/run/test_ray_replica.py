"""`train --cluster`'s replica actors keep their admin routes where a page cannot use them: the
listeners `ReplicaRole` serves (real uvicorn servers on real TCP sockets, a FakeEngine behind),
and the shard's client that the launcher configures for them."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from gymfleet.orchestrator.engines.vllm import VLLMEngine, VLLMEngineConfig
from gymfleet.run.config import ClusterConfig
from gymfleet.run.ray_replica import ReplicaListeners, admin_token, replica_ports
from tests.orchestrator.fake_engine import FakeEngine

LOAD = {"lora_name": "run-v000001", "lora_path": "/tmp/x"}


@pytest.fixture
def listeners() -> Iterator[tuple[FakeEngine, ReplicaListeners, str]]:
    engine, token = FakeEngine("r0"), admin_token()
    served = ReplicaListeners(engine, "127.0.0.1", 0, 0, token)
    served.wait_started(60)
    yield engine, served, token
    served.stop()


async def test_admin_routes_answer_only_on_the_admin_port_and_only_with_the_runs_token(
        listeners: tuple[FakeEngine, ReplicaListeners, str]) -> None:
    engine, served, token = listeners
    bearer = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=served.url) as inference:
        for route in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):  # not there, even with the token
            assert (await inference.post(route, json=LOAD, headers=bearer)).status_code == 404
        assert (await inference.get("/v1/models")).status_code == 200
    async with httpx.AsyncClient(base_url=served.admin_url) as admin:
        assert (await admin.post("/v1/load_lora_adapter", json=LOAD)).status_code == 401
        wrong = {"Authorization": f"Bearer {admin_token()}"}
        assert (await admin.post("/v1/load_lora_adapter", json=LOAD, headers=wrong)).status_code == 401
        page = {**bearer, "Origin": "null"}  # a page that somehow had the token: still refused
        assert (await admin.post("/v1/load_lora_adapter", json=LOAD, headers=page)).status_code == 403
        assert (await admin.get("/v1/models")).status_code == 404  # admin serves no inference
    assert engine.adapters == set()
    # the shard's engine as shard_policy_engines configures it: load/unload reach the admin port
    config = VLLMEngineConfig(base_url=served.url, admin_url=served.admin_url, model="base", admin_token=token)
    async with VLLMEngine(config) as client:
        await client.load_adapter("run-v000001", "/tmp/x")
        assert engine.adapters == {"run-v000001"}
        await client.unload_adapter("run-v000001")
    assert engine.adapters == set()


def test_tokens_are_fresh_ports_stable_and_admin_url_exclusive() -> None:
    assert len({admin_token() for _ in range(3)}) == 3 and len(admin_token()) >= 43  # 256 bits, base64url
    assert replica_ports(ClusterConfig(replica_port=8100), 1, 4) == (8101, 8105)
    assert replica_ports(ClusterConfig(), 1, 4) == (0, 0)
    with pytest.raises(ValueError, match="admin_url is a replica actor's"):
        VLLMEngineConfig(base_url="http://h:1", model="m", admin_url="http://h:2", admin_socket="/tmp/a.sock")
