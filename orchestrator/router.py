"""Router: spreads rollouts over engine replicas by consistent hashing and broadcasts adapters.

Every turn of a rollout goes to the replica holding its KV cache (a hash ring with virtual
nodes, keyed by rollout id, over the live replicas: ``uhashring``, ketama-compatible). A replica
that fails a health check or a request leaves the ring, so only its share of keys moves; when
it answers again it first reloads the published adapters, then rejoins and takes back only its
share. A request that fails on a replica (5xx, reset, timeout) is retried once on the next
replica of the ring; bad requests (too-long prompt, unknown adapter) are not retried.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import Field
from uhashring import HashRing

from gymfleet.core.records import Generation, SamplingParams
from gymfleet.core.strict import StrictModel
from gymfleet.orchestrator.engines.errors import (
    AdapterPublishError,
    NoReplicaError,
    ReplicaError,
    ReplicaTimeoutError,
)
from gymfleet.orchestrator.protocols import Engine

log = logging.getLogger(__name__)
T = TypeVar("T")


class RouterConfig(StrictModel):
    """How the router watches and calls its replicas."""

    vnodes: int = Field(default=160, ge=1)
    """Virtual nodes per replica on the hash ring (more = more even spread)."""
    request_timeout_s: float = Field(default=300.0, gt=0)
    """Limit of one generate call on one replica; past it the request is retried elsewhere."""
    adapter_timeout_s: float = Field(default=120.0, gt=0)
    """Limit of one adapter load/unload on one replica; past it the broadcast fails."""
    health_interval_s: float = Field(default=2.0, gt=0)
    """Seconds between health-check rounds."""
    health_timeout_s: float = Field(default=5.0, gt=0)
    """Limit of one health check; a replica that does not answer in time is dead."""


class Router:
    """An :class:`~gymfleet.orchestrator.protocols.Engine` over several replica Engines.

    Use as an async context manager: entering starts the health checks, leaving stops them
    (replicas are closed by their owner).
    """

    name = "router"

    def __init__(self, replicas: list[Engine], config: RouterConfig | None = None) -> None:
        if not replicas:
            raise ValueError("the router needs at least one replica")
        self.config = config or RouterConfig()
        self.replicas: dict[str, Engine] = {r.name: r for r in replicas}
        self.ring = HashRing(nodes=list(self.replicas), vnodes=self.config.vnodes)
        self.alive: set[str] = set(self.replicas)
        self.published: dict[str, str] = {}
        self._round_robin = itertools.count()
        self._health_task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Router:
        self._health_task = asyncio.get_running_loop().create_task(self._health_loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            await asyncio.gather(self._health_task, return_exceptions=True)

    def replica_order(self, routing_key: str | None) -> list[str]:
        """Live replicas in ring order from ``routing_key``'s position (first = its home)."""
        if not self.alive:
            return []
        if routing_key is None:
            names = sorted(self.alive)
            start = next(self._round_robin) % len(names)
            return names[start:] + names[:start]
        return [node["nodename"] for node in self.ring.range(routing_key, size=len(self.alive), unique=True)]

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        adapter: str | None = None,
        routing_key: str | None = None,
    ) -> Generation:
        """Generates on the key's home replica; on a replica failure retries once on the next one.

        Raises:
            NoReplicaError: no live replica (or none left for the retry).
            RequestError: the request is bad (not retried).
            ReplicaError: the retry failed too.
        """
        order = self.replica_order(routing_key)
        if not order:
            raise NoReplicaError("no live replica: start `gymfleet serve` replicas or check their health")
        first = order[0]
        try:
            return await self._call(first, lambda e: e.generate(prompt_ids, sampling, adapter, routing_key), self.config.request_timeout_s)
        except ReplicaError as exc:
            self._mark_dead(first, exc)
            retry = next((n for n in self.replica_order(routing_key) if n != first), None)
            if retry is None:
                raise NoReplicaError(f"replica {first!r} failed ({exc}) and no other replica is alive") from exc
            log.warning("retrying rollout %s on %s after %s failed: %s", routing_key, retry, first, exc)
            return await self._call(retry, lambda e: e.generate(prompt_ids, sampling, adapter, routing_key), self.config.request_timeout_s)

    async def load_adapter(self, name: str, path: str) -> None:
        """Broadcasts an adapter to every live replica; on any failure unloads it where it loaded.

        Raises:
            AdapterPublishError: some replica failed; no replica serves ``name`` afterwards.
        """
        targets = sorted(self.alive)
        if not targets:
            raise AdapterPublishError(f"adapter {name!r} not published: no live replica")
        results = await asyncio.gather(
            *(self._call(t, lambda e: e.load_adapter(name, path), self.config.adapter_timeout_s) for t in targets),
            return_exceptions=True,
        )
        failed = {t: r for t, r in zip(targets, results) if isinstance(r, BaseException)}
        if not failed:
            self.published[name] = path
            return
        loaded = [t for t in targets if t not in failed]
        # a replica that timed out may still finish loading: unload there too (best effort)
        await asyncio.gather(
            *(self._call(t, lambda e: e.unload_adapter(name), self.config.adapter_timeout_s) for t in targets),
            return_exceptions=True,
        )
        reasons = "; ".join(f"{t}: {r}" for t, r in failed.items())
        raise AdapterPublishError(
            f"adapter {name!r} not published: {len(failed)}/{len(targets)} replicas failed to load it "
            f"({reasons}); rolled back on {loaded}"
        )

    async def unload_adapter(self, name: str) -> None:
        """Unloads an adapter from every live replica (failures are logged, not raised)."""
        self.published.pop(name, None)
        targets = sorted(self.alive)
        results = await asyncio.gather(
            *(self._call(t, lambda e: e.unload_adapter(name), self.config.adapter_timeout_s) for t in targets),
            return_exceptions=True,
        )
        for target, result in zip(targets, results):
            if isinstance(result, BaseException):
                log.warning("unloading %s from %s failed: %s", name, target, result)

    async def health(self) -> bool:
        """True while at least one replica is alive."""
        return bool(self.alive)

    async def check_health(self) -> None:
        """One round of health checks: dead replicas leave the ring, revived ones resync and rejoin."""
        names = list(self.replicas)
        results = await asyncio.gather(*(self._probe(n) for n in names))
        for name, ok in zip(names, results):
            if not ok and name in self.alive:
                self._mark_dead(name, "failed its health check")
            elif ok and name not in self.alive:
                await self._revive(name)

    async def _probe(self, name: str) -> bool:
        try:
            async with asyncio.timeout(self.config.health_timeout_s):
                return bool(await self.replicas[name].health())
        except Exception:
            return False

    async def _revive(self, name: str) -> None:
        """Reloads the published adapters on a replica that came back, then adds it to the ring."""
        for adapter, path in list(self.published.items()):
            try:  # it may still hold an old copy
                await self._call(name, lambda e: e.unload_adapter(adapter), self.config.adapter_timeout_s)
            except Exception:
                pass
            try:
                await self._call(name, lambda e: e.load_adapter(adapter, path), self.config.adapter_timeout_s)
            except Exception as exc:
                log.warning("replica %s is back but cannot load %s: %s; keeping it out", name, adapter, exc)
                return
        self.alive.add(name)
        self.ring.add_node(name, {"vnodes": self.config.vnodes})
        log.info("replica %s rejoined the ring", name)

    def _mark_dead(self, name: str, reason: object) -> None:
        if name in self.alive:
            self.alive.discard(name)
            self.ring.remove_node(name)
            log.warning("replica %s left the ring: %s", name, reason)

    async def _call(self, name: str, fn: Callable[[Engine], Awaitable[T]], timeout_s: float) -> T:
        try:
            async with asyncio.timeout(timeout_s):
                return await fn(self.replicas[name])
        except TimeoutError as exc:
            raise ReplicaTimeoutError(f"replica {name!r} gave no answer within {timeout_s} s") from exc

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            try:
                await self.check_health()
            except Exception:  # the loop must outlive any single bad round
                log.exception("health-check round failed")
