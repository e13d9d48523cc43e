"""What an env can need from the machine (``AgentEnv.requires``), and finding out whether it is here.

An env declares its needs by name (``requires = frozenset({"docker"})``); a run asks its
:class:`~gymfleet.envs.resources.EnvResources` which are missing and leaves those tasks out
with the reasons. This module knows the sandbox backends' needs (:data:`NEEDS`: ``sandbox``,
``docker``, ``local``), probed once, in threads (a Docker ping, a bubblewrap probe, each
backend's start-up sweep), when the resources open. Any other need is a :class:`MachineNeed`
that its env family defines and lists in ``AgentEnv.machine_needs`` (the browser family's
``chromium``: ``envs/browser/chromium.py``), so no family is named here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from gymfleet.envs.errors import SandboxUnavailableError
from gymfleet.envs.sandbox.base import SandboxBackend
from gymfleet.envs.sandbox.docker import DockerBackend, DockerBackendConfig
from gymfleet.envs.sandbox.local import LocalBackend, LocalBackendConfig

log = logging.getLogger(__name__)

NEEDS: dict[str, str] = {
    "sandbox": "a sandbox backend (Docker, or bubblewrap for the local one)",
    "docker": "a Docker daemon that answers",
    "local": "bubblewrap that works (or GYMFLEET_ALLOW_UNISOLATED=1 for the unisolated fallback)",
}
"""The sandbox backends' needs, and what each means (an env family defines any other as a
:class:`MachineNeed`)."""


@dataclass(frozen=True)
class MachineNeed:
    """A need an env family defines (listed in ``AgentEnv.machine_needs``, named in ``requires``).

    Attributes:
        name: the name ``requires`` uses (``chromium``).
        what: what it is, for messages (``a Chromium binary``).
        fix: how to get it (``apt-get install chromium ...``).
        present: whether this machine has it (called when a run checks its tasks).
    """

    name: str
    what: str
    fix: str
    present: Callable[[], bool]

    def why_missing(self) -> str | None:
        """None when this machine has it; else one line saying what is missing and the fix."""
        return None if self.present() else f"no {self.what}: {self.fix}"

PROBED = ("docker", "local")
"""The sandbox backends :func:`probe_backends` knows how to make."""

FIXES: dict[str, str] = {
    "docker": "start the daemon (`make services` or `dockerd &`), set DOCKER_HOST, or use the "
              "local sandbox (sandbox: local)",
    "local": "install bubblewrap (apt-get install bubblewrap) or allow the unisolated fallback "
             "with GYMFLEET_ALLOW_UNISOLATED=1",
}


@dataclass
class Needs:
    """The probed backends, and why the others are missing.

    Attributes:
        backends: available backends by name.
        unavailable: why each probed backend that is missing is.
    """

    backends: dict[str, SandboxBackend] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)

    def why_missing(self, need: str, default_backend: str) -> str | None:
        """None when the sandbox need ``need`` is met; else one line saying what is missing and the fix."""
        if need == "sandbox":
            if default_backend != "auto":
                return self.why_missing(default_backend, default_backend)
            if self.backends:
                return None
            return "no sandbox backend: " + "; ".join(
                f"{name}: {self.unavailable.get(name, 'not probed')}" for name in ("docker", "local"))
        if need in self.backends:
            return None
        return f"no {need} sandbox backend: {self.unavailable.get(need, FIXES.get(need, 'not probed'))}"

    def backend(self, name: str) -> SandboxBackend:
        """The backend ``name``.

        Raises:
            SandboxUnavailableError: unknown, or not available (the message says the fix).
        """
        if name in self.backends:
            return self.backends[name]
        if name not in FIXES:
            raise SandboxUnavailableError(
                f"unknown sandbox backend {name!r}; choose one of auto, docker, local")
        why = self.unavailable.get(name, FIXES[name])
        raise SandboxUnavailableError(f"sandbox backend {name!r} is not available: {why}")


async def probe_backends(
    names: list[str], docker: DockerBackendConfig, local: LocalBackendConfig
) -> tuple[dict[str, SandboxBackend], dict[str, str]]:
    """Makes, probes and sweeps the backends ``names``, concurrently and in threads.

    Returns:
        ``(available backends by name, why each other one is missing)``.
    """
    probes = {"docker": lambda: _probe_docker(docker), "local": lambda: _probe_local(local)}
    results = await asyncio.gather(*(asyncio.to_thread(probes[n]) for n in names))
    found = {n: b for n, (b, _) in zip(names, results, strict=True) if b is not None}
    missing = {n: why for n, (b, why) in zip(names, results, strict=True) if b is None}
    return found, missing


def _probe_docker(config: DockerBackendConfig) -> tuple[SandboxBackend | None, str]:
    backend = DockerBackend(config)
    if not backend.available():
        backend.close()
        return None, f"no Docker daemon answers ({FIXES['docker']})"
    backend.sweep_blocking()
    return backend, ""


def _probe_local(config: LocalBackendConfig) -> tuple[SandboxBackend | None, str]:
    backend = LocalBackend(config)  # sweeps orphans of dead processes as it is made
    if backend.available():
        return backend, ""
    return None, f"bubblewrap does not work here ({FIXES['local']})"
