"""EnvResources: what every env of one process shares, opened once per run (per node).

One object holds the sandbox backends (one Docker client and thread pool, one bubblewrap probe,
one orphan sweep each, all done off the event loop when it opens), a warm
:class:`~gymfleet.envs.sandbox.pool.SandboxPool` per backend that episodes lease sandboxes from,
and the reaper of every backend on its timer. Everything else a family shares per process is a
:class:`SharedResource` it defines itself (the class is the key): ``resources.get(BrowserHosts)``
opens the family's Chromium hosts at first use and closes them with the resources, as
``resources.get(SWEHarnesses)``, ``resources.get(ImageTags)`` and each family's task catalogue
(a :class:`Catalogue`) do. This module knows no family. Envs receive it::

    async with EnvResources.open(ResourcesConfig(), run_id="r1") as resources:
        env = make_agent_env("gymfleet/Terminal-v0", resources=resources)
        ...                                           # every env made so shares the above

An env made without one opens private resources at its first reset (with a pool that keeps no
idle sandbox, so an episode's sandbox is closed when it ends) and closes them in ``close``.
The object belongs to the event loop that opened it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Generic, Literal, Self, TypeVar

from pydantic import Field

from gymfleet.core.strict import StrictModel
from gymfleet.envs.errors import SandboxClosedError, SandboxUnavailableError
from gymfleet.envs.needs import NEEDS, PROBED, MachineNeed, Needs, probe_backends
from gymfleet.envs.sandbox.base import Sandbox, SandboxBackend, SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.docker import DockerBackendConfig
from gymfleet.envs.sandbox.local import LocalBackendConfig
from gymfleet.envs.sandbox.pool import PoolConfig, SandboxPool
from gymfleet.envs.sandbox.reaper import reap_forever

log = logging.getLogger(__name__)

R = TypeVar("R", bound="SharedResource")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ResourcesConfig(StrictModel):
    """Settings of a run's :class:`EnvResources` (``resources:`` in a run config)."""

    sandbox: Literal["auto", "docker", "local"] = "auto"
    """The backend of envs that ask for ``auto``: Docker when its daemon answers, else local
    (env ``GYMFLEET_SANDBOX`` overrides ``auto``)."""
    pool: PoolConfig = Field(default_factory=lambda: PoolConfig(max_idle_per_key=1024))
    """Warm sandboxes kept per spec between rollouts; ``max_idle_per_key: 0`` turns pooling off.
    Keep it at least the run's in-flight cap, or released sandboxes are closed and restarted."""
    reap_every_s: float = Field(default=300.0, gt=0)
    """Seconds between sweeps of expired and orphaned sandboxes while the resources are open."""
    docker: DockerBackendConfig = Field(default_factory=DockerBackendConfig)
    """How the Docker backend reaches its daemon."""
    local: LocalBackendConfig = Field(default_factory=LocalBackendConfig)
    """The bubblewrap backend's settings."""

    @classmethod
    def private(cls) -> ResourcesConfig:
        """The settings of an env used alone: no idle sandbox kept, so that an episode's
        sandbox closes when it ends."""
        return cls(pool=PoolConfig(max_idle_per_key=0))


@dataclass(frozen=True)
class ResourceUsage:
    """What the resources hold now (``EnvResources.usage()``), for checks and benchmarks.

    Attributes:
        sandboxes_leased: sandboxes held by episodes now.
        sandboxes_idle: warm sandboxes waiting in the pools.
        sandboxes_started: sandboxes started so far (cold starts).
        sandboxes_reused: leases served by a warm sandbox.
        counters: what each opened :class:`SharedResource` counts (:meth:`SharedResource.counters`),
            summed by name: ``browser_contexts`` (one per running browser episode),
            ``chromium_hosts`` (Chromium processes or containers alive) and, so far,
            ``browser_pages_opened``, ``browser_pages_reused`` and
            ``browser_pages_reused_holding_task`` (reuses whose page still held the task, for an
            in-page restart) from the browser family.
    """

    sandboxes_leased: int
    sandboxes_idle: int
    sandboxes_started: int
    sandboxes_reused: int
    counters: Mapping[str, int] = field(default_factory=dict)

    @property
    def browser_contexts(self) -> int:
        """Browser contexts open now (0 when no browser env ran)."""
        return self.counters.get("browser_contexts", 0)

    @property
    def chromium_hosts(self) -> int:
        """Chromium hosts started and alive (0 when no browser env ran)."""
        return self.counters.get("chromium_hosts", 0)


class SharedResource(ABC):
    """Something every env of one process shares, registered by the family that needs it.

    The subclass is its own key: ``resources.get(BrowserHosts)`` calls :meth:`create` at the
    first request on those resources, returns the same object to every later one, and awaits
    :meth:`aclose` when the resources close (in the reverse order of opening). A plugin family
    defines its own the same way (``docs/register-env.md``); a test or a deployment may put
    another provider in front of a key with :meth:`EnvResources.provide`.
    """

    @classmethod
    @abstractmethod
    def create(cls, resources: EnvResources) -> Self:
        """Makes the resource for ``resources`` (sync and cheap: start expensive parts lazily,
        in the resource's own async methods). Called once per resources."""

    async def aclose(self) -> None:
        """Releases what the resource holds; called once, when its resources close."""
        return None

    def counters(self) -> Mapping[str, int]:
        """What it holds now, by name (summed into :meth:`EnvResources.usage`)."""
        return {}


class Catalogue(SharedResource, Generic[K, V]):
    """Values made once per process by key: a family's parsed task catalogue, typically.

    A family subclasses it with its own key and value types (the subclass is the key of
    :meth:`EnvResources.get`)::

        class TerminalTasks(Catalogue[tuple[str, tuple[str, ...]], dict[str, Task]]):
            pass  # parsed terminal task folders by (folder, chosen ids)

        tasks = resources.get(TerminalTasks).load(key, lambda: load_tasks(folder, ids))
    """

    def __init__(self) -> None:
        self._values: dict[K, V] = {}

    @classmethod
    def create(cls, resources: EnvResources) -> Self:
        return cls()

    def load(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``, made by ``make()`` at the first call (an exception is not kept)."""
        if key not in self._values:
            self._values[key] = make()
        return self._values[key]


class SandboxLease:
    """One episode's hold on a started sandbox; :meth:`release` gives it back. Idempotent.

    Attributes:
        sandbox: the started sandbox.
        backend: the name of the backend it came from.
    """

    def __init__(self, sandbox: Sandbox, backend: str, stack: AsyncExitStack,
                 on_release: Callable[[SandboxLease], None]) -> None:
        self.sandbox = sandbox
        self.backend = backend
        self._stack = stack
        self._on_release = on_release
        self._released = False

    @property
    def released(self) -> bool:
        """True once :meth:`release` ran."""
        return self._released

    async def release(self, *, discard: bool = False) -> None:
        """Returns the sandbox to its pool (reset there) or closes it.

        Args:
            discard: close the sandbox instead of pooling it (its state is suspect).
        """
        if self._released:
            return
        self._released = True
        self._on_release(self)
        if discard:
            await self.sandbox.close()  # the pool then drops it: a closed sandbox fails its reset
        await self._stack.aclose()


class EnvResources:
    """The shared resources of every env in this process; see the module docstring.

    Make it with :meth:`open`; the constructor alone probes nothing.

    Args:
        config: settings.
        run_id: the label of every sandbox leased here (the reaper's scope).
        backends: backends to use as given, by name (tests, custom backends); not probed and
            not closed here.
    """

    def __init__(self, config: ResourcesConfig | None = None, *, run_id: str = "adhoc",
                 backends: dict[str, SandboxBackend] | None = None) -> None:
        self.config = config or ResourcesConfig()
        self.run_id = run_id
        self._given = dict(backends or {})
        self._needs = Needs(backends=dict(self._given))
        self._probing = asyncio.Lock()
        self._pools: dict[str, SandboxPool] = {}
        self._leases: set[SandboxLease] = set()
        self._fresh_started = 0
        self._reapers: list[asyncio.Task[None]] = []
        self._providers: dict[type[SharedResource], Callable[[EnvResources], SharedResource]] = {}
        self._shared: dict[type[SharedResource], SharedResource] = {}
        self._closed = False

    @classmethod
    def open(cls, config: ResourcesConfig | None = None, *, run_id: str = "adhoc",
             backends: dict[str, SandboxBackend] | None = None,
             probe: Iterable[str] = ("docker", "local"),
             ) -> AbstractAsyncContextManager[EnvResources]:
        """Opens the resources: probes and sweeps the backends ``probe`` in threads and starts
        their reapers; on exit closes the pools, the browsers and the probed backends.

        Args:
            config: settings; defaults when None.
            run_id: labels every sandbox leased here.
            backends: see the class.
            probe: backends probed now (so that :meth:`missing` knows); others are probed
                when first leased from (an env's private resources probe only what it uses).
        """
        return _opened(cls(config, run_id=run_id, backends=backends), tuple(probe))

    # ---- what this machine has ---------------------------------------------------------

    def missing(self, requires: Iterable[str], defined: Iterable[MachineNeed] = ()) -> list[str]:
        """One reason per need in ``requires`` that this machine lacks (empty: all met).

        Args:
            requires: need names: ``sandbox`` (any backend), ``docker``, ``local`` (bubblewrap or
                the allowed unisolated fallback), or one of ``defined``.
            defined: the needs the env's family defines (``AgentEnv.machine_needs``: the
                browser family's ``chromium``).

        An unknown need is reported as missing.
        """
        families = {n.name: n for n in defined}
        reasons = []
        for need in sorted(set(requires)):
            if need in NEEDS:
                why = self._needs.why_missing(need, self.config.sandbox)
            elif need in families:
                why = families[need].why_missing()
            else:
                why = f"unknown requirement {need!r} (known: {', '.join(sorted([*NEEDS, *families]))})"
            if why is not None:
                reasons.append(why)
        return reasons

    async def backend_name(self, name: str = "auto") -> str:
        """``name`` with ``auto`` resolved: ``config.sandbox`` (or env ``GYMFLEET_SANDBOX``),
        then Docker when its daemon answers, else local."""
        if name == "auto":
            name = os.environ.get("GYMFLEET_SANDBOX", self.config.sandbox)
        if name == "auto":
            await self._probe(["docker"])
            return "docker" if "docker" in self._needs.backends else "local"
        return name

    async def backend(self, name: str = "auto") -> SandboxBackend:
        """The shared backend called ``name`` (``auto`` resolved), probed at first use.

        Raises:
            SandboxUnavailableError: it is unknown or not available here (the message says how to fix it).
        """
        name = await self.backend_name(name)
        await self._probe([name])
        return self._needs.backend(name)

    # ---- sandboxes -----------------------------------------------------------------------

    async def pool(self, name: str = "auto") -> SandboxPool:
        """The warm pool of backend ``name``.

        Raises:
            SandboxUnavailableError: as :meth:`backend`.
        """
        backend = await self.backend(name)
        if backend.name not in self._pools:
            self._pools[backend.name] = SandboxPool(backend, self.config.pool)
        return self._pools[backend.name]

    async def lease(self, spec: SandboxSpec, *, backend: str = "auto", fresh: bool = False,
                    labels: SandboxLabels | None = None) -> SandboxLease:
        """A started sandbox for one episode: warm from the pool, else started.

        Args:
            spec: what the sandbox must look like.
            backend: the backend's name (``auto`` resolved).
            fresh: start a new sandbox and close it on release (for envs whose task state is
                the image itself, such as SWE-bench repositories, which a reset would wipe).
            labels: labels of a newly started sandbox; default: this run's.

        Raises:
            SandboxClosedError: the resources were closed.
            SandboxUnavailableError, SandboxStartError: no sandbox could start.
        """
        if self._closed:
            raise SandboxClosedError("these EnvResources were closed; open new ones")
        chosen, pool = await self.backend(backend), await self.pool(backend)
        labels = labels or SandboxLabels(run_id=self.run_id)
        stack = AsyncExitStack()
        if fresh:  # bounded by the pool's start gate too: a burst of starts times them all out
            async with pool.start_gate():
                sandbox = await stack.enter_async_context(chosen.create(spec, labels))
            self._fresh_started += 1
        else:
            sandbox = await stack.enter_async_context(pool.acquire(spec, labels))
        lease = SandboxLease(sandbox, chosen.name, stack, self._leases.discard)
        self._leases.add(lease)
        return lease

    # ---- what families share ------------------------------------------------------------------

    def get(self, key: type[R]) -> R:
        """The shared resource of type ``key``, made at the first call (by the provider given to
        :meth:`provide`, else ``key.create``) and closed with these resources.

        Raises:
            SandboxClosedError: the resources were closed and ``key`` was never opened.
        """
        if key not in self._shared:
            if self._closed:
                raise SandboxClosedError(f"these EnvResources were closed; {key.__name__} cannot "
                                         "open on them: open new ones")
            made = self._providers.get(key, key.create)(self)
            if not isinstance(made, key):
                raise TypeError(f"the provider of {key.__name__} made a {type(made).__name__}")
            self._shared[key] = made
        return self._shared[key]  # type: ignore[return-value]  # keyed by its own type above

    def provide(self, key: type[R], make: Callable[[EnvResources], R]) -> None:
        """Makes ``make(resources)`` the provider of ``key`` here (a fake in a test, a
        deployment's own subclass); ``make`` must return an instance of ``key``.

        Raises:
            ValueError: ``key`` is open already (its users hold the first one).
        """
        if key in self._shared:
            raise ValueError(f"{key.__name__} is open already on these resources; provide it first")
        self._providers[key] = make

    def opened(self, key: type[R]) -> R | None:
        """The resource of type ``key`` if it was opened here, else None (opens nothing)."""
        return self._shared.get(key)  # type: ignore[return-value]

    # ---- state -----------------------------------------------------------------------------

    def usage(self) -> ResourceUsage:
        """What is held now; see :class:`ResourceUsage`."""
        pools = self._pools.values()
        counters: dict[str, int] = {}
        for shared in self._shared.values():
            for name, n in shared.counters().items():
                counters[name] = counters.get(name, 0) + n
        return ResourceUsage(
            sandboxes_leased=len(self._leases),
            sandboxes_idle=sum(p.idle_count() for p in pools),
            sandboxes_started=sum(p.created for p in pools) + self._fresh_started,
            sandboxes_reused=sum(p.reused for p in pools),
            counters=counters,
        )

    async def _probe(self, names: Iterable[str]) -> None:
        """Probes (and sweeps) the backends of ``names`` not probed yet, and starts their reapers."""
        async with self._probing:
            wanted = [n for n in dict.fromkeys(names) if n in PROBED
                      and n not in self._needs.backends and n not in self._needs.unavailable]
            if not wanted or self._closed:
                return
            found, unavailable = await probe_backends(wanted, self.config.docker, self.config.local)
            self._needs.backends.update(found)
            self._needs.unavailable.update(unavailable)
        for name, backend in found.items():
            self._reapers.append(asyncio.create_task(
                reap_forever(backend, self.config.reap_every_s), name=f"gymfleet-reaper-{name}"))

    async def aclose(self) -> None:
        """Closes the pools (idle sandboxes), the shared resources (newest first) and the probed
        backends. Idempotent; sandboxes still leased are closed when released."""
        if self._closed:
            return
        self._closed = True
        for task in self._reapers:
            task.cancel()
        await asyncio.gather(*self._reapers, return_exceptions=True)
        await asyncio.gather(*(pool.close() for pool in self._pools.values()))
        for key, shared in reversed(self._shared.items()):
            try:
                await shared.aclose()
            except Exception:  # one resource's failure must not leak the others
                log.exception("closing the shared %s failed", key.__name__)
        for name, backend in self._needs.backends.items():
            close = getattr(backend, "close", None)
            if name not in self._given and close is not None:
                close()  # the Docker backend's client and thread pool


@asynccontextmanager
async def _opened(resources: EnvResources, probe: tuple[str, ...]) -> AsyncIterator[EnvResources]:
    await resources._probe(probe)
    try:
        yield resources
    finally:
        await resources.aclose()
