"""Router unit tests over fake engines implementing the Engine Protocol."""

from __future__ import annotations

import pytest

from gymfleet.core.records import SamplingParams
from gymfleet.orchestrator.engines.adapters import adapter_name, adapter_version
from gymfleet.orchestrator.engines.errors import (
    AdapterPublishError,
    NoReplicaError,
    ReplicaServerError,
    UnknownAdapterError,
)
from gymfleet.orchestrator.protocols import Engine
from gymfleet.orchestrator.router import Router, RouterConfig
from tests.orchestrator.fake_engine import FakeEngine

SAMPLING = SamplingParams(max_new_tokens=2)
KEYS = [f"rollout-{i}" for i in range(2000)]


def make_router(n: int = 4, **config: float) -> tuple[Router, list[FakeEngine]]:
    fakes = [FakeEngine(f"r{i}") for i in range(n)]
    return Router(fakes, RouterConfig(**config)), fakes


def test_fake_engine_implements_protocol() -> None:
    assert isinstance(FakeEngine("x"), Engine)


def test_adapter_names_carry_version() -> None:
    assert adapter_name("run7", 12) == "run7-v000012"
    assert adapter_version("run7-v000012") == 12 and adapter_version(None) == 0


async def test_dead_replica_moves_only_its_share_and_takes_it_back() -> None:
    router, fakes = make_router()
    before = {k: router.replica_order(k)[0] for k in KEYS}
    assert set(before.values()) == {"r0", "r1", "r2", "r3"}
    fakes[2].healthy = False
    for _ in range(router.config.fail_after):
        await router.check_health()
    during = {k: router.replica_order(k)[0] for k in KEYS}
    moved = {k for k in KEYS if before[k] != during[k]}
    assert moved == {k for k in KEYS if before[k] == "r2"}
    assert "r2" not in during.values()
    fakes[2].healthy = True
    await router.check_health()
    assert {k: router.replica_order(k)[0] for k in KEYS} == before


async def test_every_turn_of_a_rollout_goes_to_its_home_replica() -> None:
    router, fakes = make_router()
    for _ in range(3):
        generation = await router.generate([1, 2, 3], SAMPLING, routing_key="rollout-42")
        assert generation.replica == router.replica_order("rollout-42")[0]


async def test_failed_request_is_retried_once_elsewhere() -> None:
    router, fakes = make_router()
    home = router.replica_order("k")[0]
    by_name = {f.name: f for f in fakes}
    by_name[home].fail_requests = True
    generation = await router.generate([1], SAMPLING, routing_key="k")
    assert generation.replica != home and home in router.alive  # one failure: slow, not dead
    assert by_name[home].calls == ["k"]


async def test_second_failure_is_raised_not_retried_again() -> None:
    router, fakes = make_router()
    for fake in fakes:
        fake.fail_requests = True
    with pytest.raises(ReplicaServerError):
        await router.generate([1], SAMPLING, routing_key="k")
    assert sum(len(f.calls) for f in fakes) == 2


async def test_hanging_replica_times_out_then_retries() -> None:
    router, fakes = make_router(request_timeout_s=0.2)
    home = router.replica_order("k")[0]
    next(f for f in fakes if f.name == home).hang = True
    generation = await router.generate([1], SAMPLING, routing_key="k")
    assert generation.replica != home


async def test_bad_request_is_not_retried() -> None:
    router, fakes = make_router()
    with pytest.raises(UnknownAdapterError):
        await router.generate([1], SAMPLING, adapter="nope-v000001", routing_key="k")
    assert sum(len(f.calls) for f in fakes) == 1 and len(router.alive) == 4


async def test_no_live_replica_is_a_clear_error() -> None:
    router, fakes = make_router(n=1, fail_after=1, outage_wait_s=0.3)
    fakes[0].healthy = False
    await router.check_health()
    with pytest.raises(NoReplicaError, match="no live replica"):
        await router.generate([1], SAMPLING, routing_key="k")


async def test_failed_broadcast_rolls_back_everywhere() -> None:
    router, fakes = make_router()
    fakes[1].fail_load = True
    with pytest.raises(AdapterPublishError, match="r1"):
        await router.load_adapter("run-v000001", "/adapters/v1")
    assert all(not f.adapters for f in fakes)
    assert "run-v000001" not in router.published


async def test_broadcast_with_a_hanging_replica_times_out_and_rolls_back() -> None:
    router, fakes = make_router(adapter_timeout_s=0.2)
    fakes[0].hang_load = True
    with pytest.raises(AdapterPublishError, match="r0"):
        await router.load_adapter("run-v000003", "/adapters/v3")
    assert all(not f.adapters for f in fakes)


async def test_broadcast_reaches_all_and_revived_replica_resyncs() -> None:
    router, fakes = make_router()
    fakes[3].healthy = False
    for _ in range(router.config.fail_after):
        await router.check_health()
    await router.load_adapter("run-v000002", "/adapters/v2")
    assert [bool(f.adapters) for f in fakes] == [True, True, True, False]
    fakes[3].healthy = True
    await router.check_health()
    assert fakes[3].adapters == {"run-v000002"} and "r3" in router.alive
    generation = await router.generate([1], SAMPLING, adapter="run-v000002", routing_key="k")
    assert generation.adapter_version == 2


async def test_health_loop_runs_in_background() -> None:
    import asyncio

    router, fakes = make_router(health_interval_s=0.05, fail_after=1)
    async with router:
        fakes[0].healthy = False
        await asyncio.sleep(0.3)
        assert "r0" not in router.alive


async def test_a_replica_leaves_only_after_several_failed_checks() -> None:
    router, fakes = make_router()
    fakes[2].healthy = False
    for _ in range(router.config.fail_after - 1):
        await router.check_health()
        assert "r2" in router.alive
    fakes[2].healthy = True
    await router.check_health()  # an answer resets the count
    fakes[2].healthy = False
    for _ in range(router.config.fail_after - 1):
        await router.check_health()
    assert "r2" in router.alive
    await router.check_health()
    assert "r2" not in router.alive


async def test_a_replica_leaves_only_after_several_failed_requests() -> None:
    router, fakes = make_router()
    home = router.replica_order("k")[0]
    next(f for f in fakes if f.name == home).fail_requests = True
    for _ in range(router.config.fail_after - 1):
        assert (await router.generate([1], SAMPLING, routing_key="k")).replica != home
        assert home in router.alive
    await router.generate([1], SAMPLING, routing_key="k")
    assert home not in router.alive


async def test_a_frozen_replica_stays_in_the_ring_and_answers_when_thawed() -> None:
    import asyncio

    router, fakes = make_router(health_timeout_s=0.05)
    home = router.replica_order("k")[0]
    frozen = next(f for f in fakes if f.name == home)
    frozen.running.clear()  # SIGSTOP: longer than a health timeout
    await router.check_health()
    request = asyncio.create_task(router.generate([1], SAMPLING, routing_key="k"))
    await router.check_health()
    assert home in router.alive and not request.done()
    frozen.running.set()  # SIGCONT
    assert (await request).replica == home  # same replica: its KV cache is kept


async def test_with_no_live_replica_a_request_waits_for_one_to_come_back() -> None:
    router, fakes = make_router(n=2, fail_after=1, outage_wait_s=60)
    for fake in fakes:
        fake.down_for_checks = 4
    await router.check_health()
    assert not router.alive
    generation = await router.generate([1], SAMPLING, routing_key="k")  # probes with backoff meanwhile
    assert generation.replica in {"r0", "r1"} and router.alive == {"r0", "r1"}


async def test_the_wait_for_a_live_replica_is_bounded() -> None:
    router, fakes = make_router(n=1, fail_after=1, outage_wait_s=0.5)
    fakes[0].healthy = False
    await router.check_health()
    with pytest.raises(NoReplicaError, match="after waiting 0.5 s"):
        await router.generate([1], SAMPLING, routing_key="k")
    assert fakes[0].calls == []


def test_session_cache_store_is_bounded_in_sessions_and_tokens() -> None:
    from gymfleet.orchestrator.engines.kv_cache import SessionCache, SessionCacheStore

    store = SessionCacheStore(max_sessions=3, max_tokens=10)
    for key, n in [("a", 4), ("b", 4), ("c", 1)]:
        store.put(key, SessionCache(list(range(n)), None, []))
    assert len(store) == 3 and store.n_tokens == 9
    store.get("a")  # a is now the most recent; b is the oldest
    store.put("d", SessionCache([1, 2], None, []))
    assert store.get("b") is None and store.n_tokens == 7
    entry = SessionCache([5, 6, 7], "x-v000001", [])
    assert entry.usable_prefix([5, 6, 7, 8], "x-v000001") == 3
    assert entry.usable_prefix([5, 6, 7], "x-v000001") == 2  # one token is always prefilled
    assert entry.usable_prefix([5, 9, 7, 8], "x-v000001") == 1
    assert entry.usable_prefix([5, 6, 7, 8], None) == 0  # another policy never reuses it
