"""Sandboxes: where agents' commands run. Backends are picked by name from ``BACKENDS``.

``open_sandbox(spec, backend="auto")`` gives a started-on-enter sandbox::

    async with open_sandbox(SandboxSpec(image="gymfleet/terminal:latest")) as sb:
        result = await sb.exec("echo hi", timeout_s=10)

"auto" means Docker when a daemon answers, else the local backend (docs/design.md).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Literal

from gymfleet.core.errors import SandboxError
from gymfleet.envs.errors import SandboxUnavailableError
from gymfleet.envs.sandbox.base import (
    ExecResult,
    Sandbox,
    SandboxBackend,
    SandboxLabels,
    SandboxSpec,
)

# name -> "module:factory"; a factory takes no arguments and returns a SandboxBackend.
BACKENDS: dict[str, str] = {
    "docker": "gymfleet.envs.sandbox.docker:DockerBackend",
    "local": "gymfleet.envs.sandbox.local:LocalBackend",
}

BackendName = Literal["auto", "docker", "local"]


def get_backend(name: str = "auto") -> SandboxBackend:
    """The backend called ``name``; "auto" (or env ``GYMFLEET_SANDBOX``) picks Docker when its
    daemon answers, else local.

    Raises:
        SandboxUnavailableError: the named backend is unknown or not available here.
    """
    name = os.environ.get("GYMFLEET_SANDBOX", name) if name == "auto" else name
    if name == "auto":
        docker = _load("docker")
        return docker if docker.available() else _load("local")
    backend = _load(name)
    if not backend.available():
        hint = {
            "docker": "start the daemon (`make services` or `dockerd &`), set DOCKER_HOST, "
            "or pass --sandbox local",
            "local": "install bubblewrap (apt-get install bubblewrap) or allow the unisolated "
            "fallback with GYMFLEET_ALLOW_UNISOLATED=1",
        }.get(name, "")
        raise SandboxUnavailableError(f"sandbox backend {name!r} is not available: {hint}")
    return backend


def _load(name: str) -> SandboxBackend:
    try:
        module_name, _, attr = BACKENDS[name].partition(":")
    except KeyError:
        raise SandboxUnavailableError(
            f"unknown sandbox backend {name!r}; choose one of auto, {', '.join(BACKENDS)}"
        ) from None
    return getattr(importlib.import_module(module_name), attr)()


@dataclass(frozen=True)
class SweepResult:
    """What :func:`sweep` did on one backend."""

    backend: str
    removed: int
    """Sandboxes removed (those of the start-up sweep included)."""
    at_start: int = 0
    """Of which the backend's own start-up sweep removed (orphaned or expired, of any run)."""
    skipped: str = ""
    """Why the backend was skipped (not installed, not available here); empty when it ran."""


async def sweep(run_id: str | None = None, expired_only: bool = True) -> list[SweepResult]:
    """Removes, on every backend available here, the sandboxes left behind: expired ones and
    those whose owner process is gone (``expired_only=False``: every one, live or not), of
    ``run_id`` or of every run. Never raises for a backend that is missing: it is skipped."""
    results = []
    for name in BACKENDS:
        try:
            backend = _load(name)
        except (ImportError, SandboxError) as exc:
            results.append(SweepResult(name, 0, skipped=str(exc)))
            continue
        if not backend.available():
            results.append(SweepResult(name, 0, skipped="not available here"))
            continue
        # a backend may sweep orphans and expired sandboxes of every run when it is made (local)
        at_start = int(getattr(backend, "swept_at_start", 0))
        removed = at_start + await backend.gc(run_id=run_id, expired_only=expired_only)
        results.append(SweepResult(name, removed, at_start))
    return results


def open_sandbox(
    spec: SandboxSpec | None = None, labels: SandboxLabels | None = None, backend: str = "auto"
) -> Sandbox:
    """A new sandbox (not started: use ``async with``)."""
    return get_backend(backend).create(spec or SandboxSpec(), labels)


__all__ = [
    "BACKENDS",
    "ExecResult",
    "Sandbox",
    "SandboxBackend",
    "SandboxLabels",
    "SandboxSpec",
    "get_backend",
    "SweepResult",
    "open_sandbox",
    "sweep",
]
