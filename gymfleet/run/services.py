"""Which tasks of a run can run here: a task whose service is missing is left out.

Each env family needs something outside Python: SWE needs a Docker daemon; MiniWoB and slides
need Chromium (slides also a sandbox); the terminal tasks need Docker when they ask for the
docker sandbox (the local backend runs anywhere). :func:`unmet_needs` says why a task cannot
run, so that the default training mix runs on any machine.

Interim: until the envs declare ``requires`` and ``EnvResources`` answers ``missing()``, the
needs are read from the env id (``open_env_resources`` yields no shared resources yet).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from gymfleet.orchestrator.config import RunConfig, TaskConfig


def docker_reachable() -> str | None:
    """None when a Docker daemon answers; else why not."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # the SDK raises several kinds; any means "no daemon here"
        return f"no Docker daemon ({type(exc).__name__}: {exc}); start Docker (make services)"
    return None


def chromium_found() -> str | None:
    """None when Chromium is installed; else why not."""
    path = os.environ.get("GYMFLEET_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if path and os.path.exists(path):
        return None
    return f"no Chromium ({path or 'not on PATH'}); apt-get install chromium (make services) or set GYMFLEET_CHROMIUM"


def _needs(task: TaskConfig) -> list[Callable[[], str | None]]:
    env = task.registered_id.lower()
    sandbox = str(task.env_kwargs.get("sandbox", "auto"))
    needs: list[Callable[[], str | None]] = []
    if "swe" in env:
        needs.append(docker_reachable)
    if "miniwob" in env or "browser" in env or "slides" in env:
        needs.append(chromium_found)
    if sandbox == "docker" and docker_reachable not in needs:
        needs.append(docker_reachable)
    return needs


def unmet_needs(task: TaskConfig, resources: Any) -> list[str]:
    """Why ``task`` cannot run on this machine: one reason per missing need (empty: it can)."""
    return [r for need in _needs(task) if (r := need()) is not None]


@asynccontextmanager
async def open_env_resources(config: RunConfig) -> AsyncIterator[Any]:
    """The envs' shared resources for ``config`` (none yet: each env opens its own)."""
    yield None
