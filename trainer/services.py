"""Which tasks of a training mix can run here: a task whose service is missing is left out.

Each env family needs something outside Python: SWE needs a Docker daemon; MiniWoB and slides
need Chromium (slides also a sandbox); the terminal tasks need Docker when they ask for the
docker sandbox (the local backend runs anywhere). :func:`available_tasks` drops the tasks whose
service is missing and says why, so that the default training mix runs on any machine.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

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


def available_tasks(run: RunConfig) -> tuple[RunConfig, dict[str, str]]:
    """The run with only the tasks whose services are present, and why each other one was left out.

    Raises:
        ValueError: no task is left (the message names each missing service).
    """
    cache: dict[Callable[[], str | None], str | None] = {}
    kept, left_out = [], {}
    for task in run.tasks:
        for need in _needs(task):
            if need not in cache:
                cache[need] = need()
        reasons = [r for need in _needs(task) if (r := cache[need]) is not None]
        if reasons:
            left_out[task.name] = "; ".join(reasons)
        else:
            kept.append(task)
    if not kept:
        raise ValueError(f"no task of run {run.run_id} can run here: {left_out}")
    return run.model_copy(update={"tasks": kept}), left_out
