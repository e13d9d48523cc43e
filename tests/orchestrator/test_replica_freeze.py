"""Slow is not dead, on real `gymfleet serve` replicas: one frozen (SIGSTOP) for longer than a health
timeout stays in the ring and answers its rollout when thawed (SIGCONT); with every replica frozen
a request waits for one to come back; a killed one leaves the ring after several failed checks."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from gymfleet.orchestrator.router import Router, RouterConfig
from tests.orchestrator.test_serve_replicas import SAMPLING, clients, serve_replicas

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.timeout(900)]
HEALTH_TIMEOUT_S = 1.0
PROMPT = [1, 2, 3, 4]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[str, subprocess.Popen[bytes], str]]]:
    """Two `gymfleet serve` processes (thawed, then stopped, at the end)."""
    with serve_replicas(tmp_path_factory.mktemp("freeze"), [[], []]) as served:
        yield served


def _router(pair: list[tuple[str, Any]]) -> tuple[Router, list[Any]]:
    engines = clients(pair, timeout_s=300.0)
    return Router(engines, RouterConfig(health_timeout_s=HEALTH_TIMEOUT_S, outage_wait_s=300.0)), engines


def _key_on(router: Router, name: str) -> str:
    return next(k for k in (f"freeze-{i}" for i in range(200)) if router.replica_order(k)[0] == name)


async def test_a_frozen_replica_stays_in_the_ring_and_answers_when_thawed(pair: list[tuple[str, Any]]) -> None:
    router, engines = _router(pair)
    key, pid = _key_on(router, "replica0"), pair[0][1].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(router.config.fail_after - 1):
            await router.check_health()  # each check waits out its timeout: frozen longer than that
        assert router.alive == {"replica0", "replica1"} and router.failures["replica0"] == router.config.fail_after - 1
        request = asyncio.create_task(router.generate(PROMPT, SAMPLING, routing_key=key))
        done, _ = await asyncio.wait({request}, timeout=2 * HEALTH_TIMEOUT_S)
        assert not done  # a frozen replica cannot answer; the request waits on it, not elsewhere
    finally:
        os.kill(pid, signal.SIGCONT)
    generation = await asyncio.wait_for(request, timeout=300)
    assert generation.replica == "replica0"  # its home: the KV cache stays useful
    await router.check_health()
    assert router.failures["replica0"] == 0
    for engine in engines:
        await engine.aclose()


async def test_with_every_replica_frozen_a_request_waits_for_one(pair: list[tuple[str, Any]]) -> None:
    router, engines = _router(pair)
    pids = [proc.pid for _, proc, _ in pair]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(router.config.fail_after):
            await router.check_health()
        assert not router.alive
        request = asyncio.create_task(router.generate(PROMPT, SAMPLING, routing_key="outage"))
        done, _ = await asyncio.wait({request}, timeout=2 * HEALTH_TIMEOUT_S)
        assert not done  # waiting with backoff, not failing with NoReplicaError
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    generation = await asyncio.wait_for(request, timeout=300)
    assert generation.replica in {"replica0", "replica1"} and router.alive
    for engine in engines:
        await engine.aclose()


async def test_a_killed_replica_leaves_after_several_failed_checks(pair: list[tuple[str, Any]]) -> None:
    router, engines = _router(pair)
    key, proc = _key_on(router, "replica1"), pair[1][1]
    proc.kill()
    proc.wait()
    generation = await router.generate(PROMPT, SAMPLING, routing_key=key)
    assert generation.replica == "replica0" and "replica1" in router.alive  # one failure: retried elsewhere
    for _ in range(router.config.fail_after - 1):
        await router.check_health()
    assert router.alive == {"replica0"}
    for engine in engines:
        await engine.aclose()
