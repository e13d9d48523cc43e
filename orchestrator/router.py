"""Router: spreads rollouts over engine replicas by consistent hashing and broadcasts adapters.

Every turn of a rollout goes to the replica holding its KV cache (a hash ring with virtual
nodes, keyed by rollout id, over the live replicas: ``uhashring``, ketama-compatible).

Slow is not dead: a replica leaves the ring only after ``fail_after`` consecutive failed health
checks or requests (one missed check on a loaded machine is a starved replica, not a dead one);
any answer resets its count. Leaving moves only its share of keys; when it answers again it first
reloads the published adapters, then rejoins and takes back only its share. A request that fails
on a replica (5xx, reset, timeout) is retried once on the next replica of the ring; bad requests
(too-long prompt, unknown adapter) are not retried. While no replica is live, a request waits
with exponential backoff (tenacity) up to ``outage_wait_s`` for one to come back (the rollout's
turn timeout bounds the wait too), and only then raises :class:`NoReplicaError`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import Field
from tenacity import AsyncRetrying, retry_if_result, stop_after_delay, wait_exponential
from uhashring import HashRing

from gymfleet.core.records import Generation, SamplingParams
from gymfleet.orchestrator.engines.limits import ReplicaLimits
from gymfleet.orchestrator.engines.errors import (
    AdapterPublishError,
    NoReplicaError,
    ReplicaError,
    ReplicaTimeoutError,
)
from gymfleet.orchestrator.protocols import Engine

log = logging.getLogger(__name__)
T = TypeVar("T")


class RouterConfig(ReplicaLimits):
    """How the router watches and calls its replicas: the per-call limits
    (:class:`~gymfleet.orchestrator.engines.limits.ReplicaLimits`: ``request_timeout_s``,
    ``adapter_timeout_s``, ``health_timeout_s``) and the ring's settings below."""

    vnodes: int = Field(default=160, ge=1)
    """Virtual nodes per replica on the hash ring (more = more even spread)."""
    health_interval_s: float = Field(default=2.0, gt=0)
    """Seconds between health-check rounds."""
    fail_after: int = Field(default=3, ge=1)
    """Consecutive failed health checks or requests after which a replica leaves the ring."""
    outage_wait_s: float = Field(default=300.0, ge=0)
    """How long a request waits for a live replica when none is (backoff from 0.1 s up to 5 s
    between looks); past it the request raises NoReplicaError."""


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
        self.failures: dict[str, int] = dict.fromkeys(self.replicas, 0)
        """Consecutive failed checks or requests per replica (reset by any answer)."""
        self.published: dict[str, str] = {}
        self._round_robin = itertools.count()
        self._health_task: asyncio.Task[None] | None = None
        self._health_lock = asyncio.Lock()

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
            NoReplicaError: no live replica, and none came back within ``outage_wait_s``.
            RequestError: the request is bad (not retried).
            ReplicaError: the retry failed too, or the only live replica failed.
        """
        order = await self.live_order(routing_key)
        first = order[0]
        try:
            return await self._generate_on(first, prompt_ids, sampling, adapter, routing_key)
        except ReplicaError as exc:
            self._failed(first, exc)
            others = [n for n in self.replica_order(routing_key) if n != first]
            if not others and first in self.alive:
                raise  # the only live replica is slow or failing but not dead: the caller decides
            retry = others[0] if others else (await self.live_order(routing_key))[0]
            log.warning("retrying rollout %s on %s after %s failed: %s", routing_key, retry, first, exc)
            return await self._generate_on(retry, prompt_ids, sampling, adapter, routing_key)

    async def live_order(self, routing_key: str | None) -> list[str]:
        """:meth:`replica_order`, waiting with backoff up to ``outage_wait_s`` while it is empty.

        Without the background health loop (router not entered) each look probes the replicas.

        Raises:
            NoReplicaError: still no live replica at the end of the wait.
        """
        order = self.replica_order(routing_key)
        if order:
            return order
        log.warning("no live replica: waiting up to %g s for one to come back", self.config.outage_wait_s)
        order = await AsyncRetrying(
            retry=retry_if_result(lambda found: not found),
            wait=wait_exponential(multiplier=0.1, max=5.0),
            stop=stop_after_delay(self.config.outage_wait_s),
            retry_error_callback=lambda state: [],
        )(self._look, routing_key)
        if not order:
            raise NoReplicaError(
                f"no live replica after waiting {self.config.outage_wait_s:g} s: start `gymfleet serve` "
                "replicas or check their health"
            )
        return order

    async def _look(self, routing_key: str | None) -> list[str]:
        if self._health_task is None:  # nobody else probes
            await self.check_health()
        return self.replica_order(routing_key)

    async def _generate_on(
        self, name: str, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None, routing_key: str | None
    ) -> Generation:
        generation = await self._call(
            name, lambda e: e.generate(prompt_ids, sampling, adapter, routing_key), self.config.request_timeout_s
        )
        self.failures[name] = 0
        return generation

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
        """One round of health checks: a replica failing its ``fail_after``-th check in a row
        leaves the ring; one that answers again resyncs its adapters and rejoins."""
        async with self._health_lock:
            names = list(self.replicas)
            results = await asyncio.gather(*(self._probe(n) for n in names))
            for name, ok in zip(names, results):
                if not ok:
                    self._failed(name, f"failed {self.failures[name] + 1} health checks in a row")
                    continue
                self.failures[name] = 0
                if name not in self.alive:
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

    def _failed(self, name: str, reason: object) -> None:
        """Counts one failure; the ``fail_after``-th in a row takes the replica out of the ring."""
        self.failures[name] += 1
        if self.failures[name] >= self.config.fail_after:
            self._mark_dead(name, reason)
        elif name in self.alive:
            log.info("replica %s failed (%d/%d before it leaves the ring): %s",
                     name, self.failures[name], self.config.fail_after, reason)

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
