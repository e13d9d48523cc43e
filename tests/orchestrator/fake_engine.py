"""Engines for router and gateway tests: a scripted replica, and a recorder around a real one."""

from __future__ import annotations

import asyncio

from gymfleet.core.records import Generation, SamplingParams
from gymfleet.orchestrator.engines.adapters import adapter_version
from gymfleet.orchestrator.engines.errors import AdapterError, ReplicaServerError, UnknownAdapterError
from gymfleet.orchestrator.protocols import Engine


class FakeEngine:
    """A scripted replica implementing the Engine Protocol, with switchable failure modes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.adapters: set[str] = set()
        self.healthy = True
        self.fail_requests = False
        self.hang = False
        self.fail_load = False
        self.hang_load = False
        self.calls: list[str | None] = []
        self.running = asyncio.Event()
        """Cleared: the replica is frozen (as under SIGSTOP): every call waits until it is set again."""
        self.running.set()
        self.down_for_checks = 0
        """Health checks still to fail before the replica answers again."""

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None, routing_key: str | None = None
    ) -> Generation:
        self.calls.append(routing_key)
        await self.running.wait()
        if self.hang:
            await asyncio.sleep(3600)
        if self.fail_requests:
            raise ReplicaServerError(f"{self.name}: HTTP 500")
        if adapter is not None and adapter not in self.adapters:
            raise UnknownAdapterError(adapter)
        return Generation([7, 8], [-0.5, -0.25], "stop", adapter_version(adapter), self.name, len(prompt_ids))

    async def load_adapter(self, name: str, path: str) -> None:
        if self.fail_load:
            raise AdapterError(f"{self.name}: cannot load {path}")
        self.adapters.add(name)
        if self.hang_load:  # loads, but answers too late
            await asyncio.sleep(3600)

    async def unload_adapter(self, name: str) -> None:
        if name not in self.adapters:
            raise UnknownAdapterError(name)
        self.adapters.discard(name)

    async def health(self) -> bool:
        await self.running.wait()
        if self.down_for_checks:
            self.down_for_checks -= 1
            return False
        return self.healthy


class RecordingEngine:
    """Wraps a real engine and records every prompt it was sent (an Engine itself)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name = engine.name
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None,
                       routing_key: str | None = None) -> Generation:
        self.prompts.append(list(prompt_ids))
        return await self.engine.generate(prompt_ids, sampling, adapter, routing_key)

    async def load_adapter(self, name: str, path: str) -> None:
        await self.engine.load_adapter(name, path)

    async def unload_adapter(self, name: str) -> None:
        await self.engine.unload_adapter(name)

    async def health(self) -> bool:
        return await self.engine.health()
