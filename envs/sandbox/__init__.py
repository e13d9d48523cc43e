"""Sandboxes: where agents' commands run. Backends are picked by name from ``BACKENDS``.

``open_sandbox(spec, backend="auto")`` gives a started-on-enter sandbox::

    async with open_sandbox(SandboxSpec(image="gymfleet/terminal:latest")) as sb:
        result = await sb.exec("echo hi", timeout_s=10)

"auto" means Docker when a daemon answers, else the local backend (docs/design.md).
"""

from __future__ import annotations

import importlib
import os
from typing import Literal

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
    "open_sandbox",
]
