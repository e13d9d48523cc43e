"""Warm sandboxes kept per spec, so that a rollout does not pay a sandbox's start-up.

``async with pool.acquire(spec, labels) as sb`` hands out a warm sandbox of the same
:meth:`SandboxSpec.pool_key` when one is idle, else starts a new one. On release the sandbox is
reset (its processes killed, its workdir and /tmp emptied), checked with ``true`` (unless its own
reset ran a command), and kept for
the next user, at most ``max_idle_per_key`` per key; one that fails any of this is closed. Works
with any :class:`~gymfleet.envs.sandbox.base.SandboxBackend`: a sandbox with its own
``reset()`` (:class:`ResettableSandbox`) resets itself, other isolated ones get
:data:`GENERIC_RESET`, and an unisolated one without ``reset()`` is closed, never reused (the
generic reset would kill the host's processes).

Reset happens inside ``acquire``'s exit (no background tasks), so a pool can be driven from
successive event loops.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pydantic import Field

from gymfleet.core.errors import SandboxError
from gymfleet.core.strict import StrictModel
from gymfleet.envs.errors import SandboxClosedError
from gymfleet.envs.sandbox.base import Sandbox, SandboxBackend, SandboxLabels, SandboxSpec

log = logging.getLogger(__name__)

GENERIC_RESET = (
    "cd / ; rm -rf -- {workdir}/* {workdir}/.[!.]* {workdir}/..?* /tmp/* /tmp/.[!.]* 2>/dev/null; "
    'for p in /proc/[0-9]*; do pid=${{p#/proc/}}; '
    'case "$pid" in 1|"$$"|"$PPID") continue;; esac; kill -9 "$pid" 2>/dev/null; done; true'
)
"""Shell reset for sandboxes without ``reset()``: empty the workdir and /tmp, kill every process
but pid 1 and this shell (``{workdir}`` is filled in, quoted)."""


class PoolConfig(StrictModel):
    """Settings of a :class:`SandboxPool`."""

    max_idle_per_key: int = 4
    """Warm sandboxes kept per spec after release; more are closed."""
    reset_timeout_s: float = 60.0
    """Seconds a reset (and its health check) may take before the sandbox is discarded."""
    min_ttl_left_s: float = 60.0
    """A warm sandbox expiring within this many seconds is closed rather than handed out."""
    max_uses: int = 0
    """Uses after which a sandbox is closed instead of reset; 0 means no limit."""
    max_starting: int = Field(default=8, ge=1)
    """Sandboxes starting at once; more wait their turn. A burst of cold starts (a run's first
    thousand rollouts) beyond what the machine runs at once makes every start slow enough to
    time out."""


@runtime_checkable
class ResettableSandbox(Protocol):
    """A sandbox that can make itself fresh, cheaper or more thoroughly than GENERIC_RESET."""

    async def reset(self) -> bool:
        """Kills the commands' processes and empties the workdir; False when unhealthy.

        A class whose ``True`` already proves that commands run (its reset ran one as the
        sandbox's user) sets the class attribute ``reset_runs_a_command = True``: the pool then
        skips its ``true`` health check (one process and round trip per rollout)."""
        ...


@dataclass
class _Slot:
    sandbox: Sandbox
    key: str
    uses: int = 0


class SandboxPool:
    """Warm sandboxes of one backend, per spec.

    Args:
        backend: makes the sandboxes (any SandboxBackend).
        config: limits; defaults when None.

    Attributes:
        created: sandboxes started by this pool so far.
        reused: acquisitions served by a warm sandbox.
    """

    def __init__(self, backend: SandboxBackend, config: PoolConfig | None = None) -> None:
        self.backend = backend
        self.config = config or PoolConfig()
        self.created = 0
        self.reused = 0
        self._idle: dict[str, list[_Slot]] = {}
        self._gate: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._closed = False

    @asynccontextmanager
    async def acquire(
        self, spec: SandboxSpec, labels: SandboxLabels | None = None
    ) -> AsyncIterator[Sandbox]:
        """A started sandbox for ``spec``, returned to the pool (reset) on exit.

        Args:
            spec: what the sandbox must look like; warm ones are matched by ``spec.pool_key()``.
            labels: labels of a newly started sandbox; a warm one keeps those it started with.

        Raises:
            SandboxClosedError: the pool was closed.
            SandboxStartError, SandboxUnavailableError: a new sandbox could not start.
        """
        slot = await self._take(spec, labels)
        try:
            yield slot.sandbox
        finally:
            await self._give_back(slot)

    async def prewarm(self, spec: SandboxSpec, n: int, labels: SandboxLabels | None = None) -> None:
        """Starts sandboxes until ``n`` (at most ``max_idle_per_key``) are idle for ``spec``."""
        key = spec.pool_key()
        want = min(n, self.config.max_idle_per_key) - len(self._idle.get(key, []))
        slots = await asyncio.gather(*(self._start(spec, labels) for _ in range(max(want, 0))))
        self._idle.setdefault(key, []).extend(slots)

    def idle_count(self, spec: SandboxSpec | None = None) -> int:
        """Idle sandboxes for ``spec`` (all specs when None)."""
        if spec is not None:
            return len(self._idle.get(spec.pool_key(), []))
        return sum(len(slots) for slots in self._idle.values())

    async def close(self) -> None:
        """Closes every idle sandbox; busy ones close when released. Idempotent."""
        self._closed = True
        idle = [slot for slots in self._idle.values() for slot in slots]
        self._idle.clear()
        await asyncio.gather(*(_close_quietly(slot.sandbox) for slot in idle))

    async def __aenter__(self) -> SandboxPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _take(self, spec: SandboxSpec, labels: SandboxLabels | None) -> _Slot:
        if self._closed:
            raise SandboxClosedError("the sandbox pool was closed; make a new SandboxPool")
        idle = self._idle.get(spec.pool_key(), [])
        while idle:
            slot = idle.pop()
            if self._expiring(slot.sandbox):
                await _close_quietly(slot.sandbox)
                continue
            self.reused += 1
            slot.uses += 1
            return slot
        slot = await self._start(spec, labels)
        slot.uses = 1
        return slot

    def start_gate(self) -> asyncio.Semaphore:
        """The semaphore bounding starts at ``max_starting`` (one per event loop driving the pool)."""
        loop = asyncio.get_running_loop()
        if self._gate is None or self._gate[0] is not loop:
            self._gate = (loop, asyncio.Semaphore(self.config.max_starting))
        return self._gate[1]

    async def _start(self, spec: SandboxSpec, labels: SandboxLabels | None) -> _Slot:
        sandbox = self.backend.create(spec, labels)
        try:
            async with self.start_gate():
                await sandbox.start()
        except BaseException:
            await _close_quietly(sandbox)
            raise
        self.created += 1
        return _Slot(sandbox, spec.pool_key())

    async def _give_back(self, slot: _Slot) -> None:
        try:
            keep = (
                not self._closed
                and not (self.config.max_uses and slot.uses >= self.config.max_uses)
                and len(self._idle.get(slot.key, [])) < self.config.max_idle_per_key
                and not self._expiring(slot.sandbox)
                and await self._reset(slot.sandbox)
            )
        except BaseException:  # the reset failed or was cancelled (a run stopping): the sandbox must not outlive it
            await asyncio.shield(_close_quietly(slot.sandbox))
            raise
        # the pool may have closed, or filled up, while the reset ran
        idle = self._idle.setdefault(slot.key, [])
        if keep and not self._closed and len(idle) < self.config.max_idle_per_key:
            idle.append(slot)
        else:
            await _close_quietly(slot.sandbox)

    async def _reset(self, sandbox: Sandbox) -> bool:
        if not isinstance(sandbox, ResettableSandbox) and not sandbox.isolated:
            # GENERIC_RESET kills every process it can see: on an unisolated sandbox that is the
            # host's. Such a sandbox is never reused.
            return False
        try:
            async with asyncio.timeout(self.config.reset_timeout_s):
                if isinstance(sandbox, ResettableSandbox):
                    if not await sandbox.reset():
                        return False
                    if getattr(sandbox, "reset_runs_a_command", False):
                        return True
                else:
                    script = GENERIC_RESET.format(workdir=shlex.quote(sandbox.spec.workdir))
                    await sandbox.exec(script, timeout_s=self.config.reset_timeout_s)
                return (await sandbox.exec("true", timeout_s=self.config.reset_timeout_s)).ok
        except (SandboxError, TimeoutError, OSError) as exc:
            log.info("discarding a sandbox that failed its reset: %s", exc)
            return False

    def _expiring(self, sandbox: Sandbox) -> bool:
        expires_at = sandbox.labels.expires_at
        return bool(expires_at) and expires_at - time.time() < self.config.min_ttl_left_s


async def _close_quietly(sandbox: Sandbox) -> None:
    try:
        await sandbox.close()
    except Exception as exc:  # a sandbox that cannot close must not stop the others closing
        log.warning("closing a sandbox failed: %s", exc)
