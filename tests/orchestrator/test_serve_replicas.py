"""Four real `gymfleet serve` replica processes behind the router: failures lose no rollout.

Started once for the module (each loads the embedded model). The kill test runs last.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from gymfleet.core.records import Message, SamplingParams
from gymfleet.orchestrator.engines.errors import AdapterPublishError, ContextLengthError, UnknownAdapterError
from gymfleet.orchestrator.engines.limits import ReplicaLimits
from gymfleet.orchestrator.engines.vllm import VLLMEngine, VLLMEngineConfig
from gymfleet.orchestrator.gateway import Gateway
from gymfleet.orchestrator.router import Router, RouterConfig
from tests.orchestrator.fake_http import fake_replica

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.timeout(600)]
BASE = "smollm2-135m"
CONTEXT = 512
SAMPLING = SamplingParams(temperature=0.7, max_new_tokens=6, seed=3)
ADMIN_TOKEN = "replica-admin-token"
"""The admin token every replica of these tests takes (``--admin-token-file``)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(urls: list[str], procs: list[subprocess.Popen[bytes]], logs: list[Path], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pending = set(range(len(urls)))
    while pending and time.monotonic() < deadline:
        for i in list(pending):
            if procs[i].poll() is not None:
                raise RuntimeError(f"replica {urls[i]} exited: {logs[i].read_text()[-2000:]}")
            try:
                if httpx.get(f"{urls[i]}/health", timeout=2).status_code == 200:
                    pending.discard(i)
            except httpx.HTTPError:
                pass
        time.sleep(1)
    if pending:
        raise RuntimeError(f"replicas {[urls[i] for i in pending]} not healthy after {timeout_s} s")


@contextmanager
def serve_replicas(folder: Path, extra_args: list[list[str]]) -> Iterator[list[tuple[str, subprocess.Popen[bytes], str]]]:
    """One `gymfleet serve` process per entry of ``extra_args`` (its own flags), healthy before it
    yields ``(url, process, admin socket)`` each (the socket at its default place, beside the token
    file); each is thawed (SIGCONT, in case a test froze it), terminated, then killed if it lingers."""
    urls, procs, logs, sockets = [], [], [], []
    token_file = folder / "admin-token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    for i, extra in enumerate(extra_args):
        port, log = _free_port(), folder / f"replica{i}.log"
        cmd = [sys.executable, "-m", "gymfleet.cli", "serve", "--port", str(port), "--name", f"replica{i}",
               "--served-model-name", BASE, "--threads", "1", "--max-context-tokens", str(CONTEXT),
               "--admin-token-file", str(token_file), *extra]
        procs.append(subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT))
        urls.append(f"http://127.0.0.1:{port}")
        logs.append(log)
        sockets.append(str(folder / f"serve-{port}.sock"))
    try:
        _wait_healthy(urls, procs, logs, timeout_s=420)
        yield list(zip(urls, procs, sockets))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[str, subprocess.Popen[bytes], str]]]:
    """Four `gymfleet serve` processes; the last holds at most one adapter (to make a broadcast fail)."""
    extra = [["--max-adapters", "1" if i == 3 else "4"] for i in range(4)]
    with serve_replicas(tmp_path_factory.mktemp("replicas"), extra) as served:
        yield served


def clients(replicas: list[tuple[str, Any]], timeout_s: float = 120.0) -> list[VLLMEngine]:
    return [VLLMEngine(VLLMEngineConfig(base_url=url, model=BASE, name=f"replica{i}", admin_token=ADMIN_TOKEN,
                                        admin_socket=admin_socket),
                       limits=ReplicaLimits(request_timeout_s=timeout_s))
            for i, (url, _, admin_socket) in enumerate(replicas)]


async def run_rollout(gateway: Gateway, rollout_id: str, n_turns: int) -> Any:
    session = gateway.open_session(rollout_id, [Message("system", "Be brief."), Message("user", f"Task {rollout_id}.")])
    for turn in range(n_turns):
        await session.generate(SAMPLING)
        session.add_message("tool", f"observation {turn}")
    return session


def assert_token_exact(session: Any) -> None:
    ids = session.token_ids
    generated = [t for t, m in zip(ids, session.loss_mask) if m]
    assert generated == [t for g in session.generations for t in g.token_ids]
    assert [lp for lp, m in zip(session.logprobs, session.loss_mask) if m] == [lp for g in session.generations for lp in g.logprobs]


async def test_completions_caches_and_bad_input_over_http(replicas: list[tuple[str, Any]], smollm_tokenizer: Any) -> None:
    engine = clients(replicas)[0]
    async with engine:
        prompt = list(smollm_tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)["input_ids"])
        first = await engine.generate(prompt, SAMPLING, routing_key="http-1")
        second = await engine.generate(prompt + first.token_ids + [198], SAMPLING, routing_key="http-1")
        assert second.n_cached_tokens == len(prompt) + len(first.token_ids) - 1
        assert first.replica == "replica0" and first.n_prompt_tokens == len(prompt)
        with pytest.raises(ContextLengthError, match="context window"):
            await engine.generate(list(range(100, 100 + CONTEXT + 10)), SAMPLING)
        with pytest.raises(UnknownAdapterError, match="does not exist"):
            await engine.generate(prompt, SAMPLING, adapter="run-v000077")


async def test_admin_routes_are_on_the_socket_only(replicas: list[tuple[str, Any, str]], lora_dirs: list[Path]) -> None:
    """What a page on this host could reach (the TCP port) serves no admin route, even with the
    token; the admin socket is the owner's alone (0600) and still asks for the token."""
    url, _, admin_socket = replicas[0]
    body = {"lora_name": "run-v000009", "lora_path": str(lora_dirs[0])}
    bearer = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    for route in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        assert httpx.post(f"{url}{route}", json=body, headers=bearer, timeout=30).status_code == 404
    assert stat.S_IMODE(os.stat(admin_socket).st_mode) == 0o600
    with httpx.Client(transport=httpx.HTTPTransport(uds=admin_socket), base_url="http://admin") as admin:
        assert admin.post("/v1/load_lora_adapter", json=body, timeout=30).status_code == 401
    served = {m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]}
    assert "run-v000009" not in served


async def test_failed_broadcast_leaves_no_replica_serving_it(replicas: list[tuple[str, Any]], lora_dirs: list[Path]) -> None:
    engines = clients(replicas)
    router = Router(engines, RouterConfig())
    await router.load_adapter("run-v000001", str(lora_dirs[0]))  # replica3 is now full (max 1 adapter)
    with pytest.raises(AdapterPublishError, match="replica3") as info:
        await router.load_adapter("run-v000002", str(lora_dirs[1]))
    assert "not published" in str(info.value)
    for url, *_ in replicas:
        served = {m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]}
        assert "run-v000002" not in served and "run-v000001" in served
    generation = await router.generate([1, 2, 3], SAMPLING, adapter="run-v000001", routing_key="a")
    assert generation.adapter_version == 1
    await router.unload_adapter("run-v000001")
    for engine in engines:
        await engine.aclose()


@pytest.mark.parametrize("mode", ["500", "hang"])
async def test_500_or_hanging_replica_loses_no_rollout(
    replicas: list[tuple[str, Any]], smollm_tokenizer: Any, mode: str
) -> None:
    with fake_replica(mode) as url:
        bad = VLLMEngine(VLLMEngineConfig(base_url=url, model=BASE, name="fake"),
                         limits=ReplicaLimits(request_timeout_s=2.0))
        engines = clients(replicas) + [bad]
        router = Router(engines, RouterConfig())
        ids = [f"r{i}" for i in range(60) if router.replica_order(f"r{i}")[0] == "fake"][:3]
        gateway = Gateway(smollm_tokenizer, router)
        sessions = await asyncio.wait_for(asyncio.gather(*(run_rollout(gateway, rid, 2) for rid in ids)), timeout=300)
        for engine in engines:
            await engine.aclose()
    assert "fake" not in router.alive
    for session in sessions:
        assert len(session.generations) == 2
        assert all(g.replica.startswith("replica") for g in session.generations)
        assert_token_exact(session)


async def test_killing_a_replica_mid_run_loses_no_rollout(replicas: list[tuple[str, Any]], smollm_tokenizer: Any) -> None:
    engines = clients(replicas)
    router = Router(engines, RouterConfig(health_interval_s=0.5, health_timeout_s=2))
    victim_name, victim_proc = "replica1", replicas[1][1]
    gateway = Gateway(smollm_tokenizer, router)
    rollout_ids = [f"kill-{i}" for i in range(12)]
    on_victim = [r for r in rollout_ids if router.replica_order(r)[0] == victim_name]
    assert on_victim, "some rollouts must live on the victim"

    async def kill_after_first_turns() -> None:
        while sum(1 for _ in victim_calls()) < 1:
            await asyncio.sleep(0.05)
        victim_proc.kill()

    sessions: list[Any] = []

    def victim_calls() -> list[Any]:
        return [g for s in sessions for g in s.generations if g.replica == victim_name]

    async def rollout(rid: str) -> Any:
        session = gateway.open_session(rid, [Message("system", "Be brief."), Message("user", f"Task {rid}.")])
        sessions.append(session)
        for turn in range(3):
            await session.generate(SAMPLING)
            session.add_message("tool", f"observation {turn}")
        return session

    async with router:
        killer = asyncio.create_task(kill_after_first_turns())
        done = await asyncio.wait_for(asyncio.gather(*(rollout(r) for r in rollout_ids)), timeout=400)
        await killer
    for engine in engines:
        await engine.aclose()
    assert victim_proc.poll() is not None and victim_name not in router.alive
    assert len(done) == len(rollout_ids)
    for session in done:
        assert len(session.generations) == 3
        assert_token_exact(session)
    moved = [s for s in done if s.rollout_id in on_victim]
    assert any(s.generations[-1].replica != victim_name for s in moved)
