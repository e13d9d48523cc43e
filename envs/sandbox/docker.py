"""The Docker sandbox backend: one container per sandbox, driven through the docker SDK.

A container (:mod:`~gymfleet.envs.sandbox.docker_container`) runs gymfleet's keep-alive as PID 1
with the spec's CPU, memory, pids and disk limits, no network unless the spec asks, and
``gymfleet.*`` labels (run, rollout, expiry, owner pid and start time, host) so that
:meth:`DockerBackend.gc` can find what nobody owns. :class:`~gymfleet.envs.sandbox.docker_sandbox.DockerSandbox`
runs commands through the wrapper of :mod:`gymfleet.envs.sandbox.docker_exec`; every Docker
failure becomes the sandbox error tree (:mod:`gymfleet.envs.sandbox.docker_errors`). The SDK
blocks, so every call runs in the backend's thread pool (sized for many concurrent sandboxes,
unlike asyncio's default of cores + 4).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions
from gymfleet.core.errors import SandboxError
from gymfleet.core.strict import StrictModel
from gymfleet.envs.errors import SandboxUnavailableError
from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.docker_container import StorageFacts
from gymfleet.envs.sandbox.docker_errors import docker_errors
from gymfleet.envs.sandbox.docker_gc import reap
from gymfleet.envs.sandbox.docker_sandbox import DockerSandbox

T = TypeVar("T")

__all__ = ["DockerBackend", "DockerBackendConfig", "DockerSandbox"]


class DockerBackendConfig(StrictModel):
    """How the Docker backend reaches its daemon."""

    base_url: str | None = None
    """Daemon URL (``unix:///var/run/docker.sock``, ``tcp://host:2376``); None: ``DOCKER_HOST``."""
    api_timeout_s: float = 120.0
    """Timeout of one API call, seconds (not of a command: those have their own)."""
    max_threads: int = 128
    """Threads for the blocking SDK calls: bounds how many sandboxes make progress at once."""
    kill_grace_s: float = 10.0
    """After a timed-out command's group is killed, how long to wait for its wrapper to report."""


class DockerBackend:
    """Makes :class:`DockerSandbox` es; sweeps orphans once, before its first sandbox starts.

    Attributes:
        storage: what it learned of the daemon's storage (quota support, images' workdirs).
    """

    name = "docker"

    def __init__(self, config: DockerBackendConfig | None = None) -> None:
        self.config = config or DockerBackendConfig()
        self._client: docker.DockerClient | None = None
        self._executor = ThreadPoolExecutor(self.config.max_threads, thread_name_prefix="gymfleet-docker")
        self._swept = False
        self.storage = StorageFacts()

    def client(self) -> docker.DockerClient:
        """The SDK client, connected on first use.

        Raises:
            SandboxUnavailableError: no daemon answers.
        """
        if self._client is None:
            try:
                kwargs: dict[str, Any] = {"timeout": int(self.config.api_timeout_s)}
                kwargs["max_pool_size"] = self.config.max_threads
                if self.config.base_url:
                    self._client = docker.DockerClient(base_url=self.config.base_url, **kwargs)
                else:
                    self._client = docker.from_env(**kwargs)
            except docker.errors.DockerException as exc:
                where = self.config.base_url or os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
                raise SandboxUnavailableError(
                    f"Docker daemon not reachable at {where} ({exc}): start it (`make services`), "
                    "set DOCKER_HOST, or pass --sandbox local"
                ) from exc
        return self._client

    def available(self) -> bool:
        """True when the daemon answers a ping."""
        try:
            return bool(self.client().ping())
        except (SandboxUnavailableError, docker.errors.DockerException, requests.exceptions.RequestException):
            return False

    def create(self, spec: SandboxSpec, labels: SandboxLabels | None = None) -> DockerSandbox:
        """A new, not yet started sandbox."""
        return DockerSandbox(self, spec, labels or SandboxLabels())

    async def run_blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Runs a blocking SDK call in the backend's thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    def sweep_blocking(self) -> int:
        """Runs the start-up sweep now, in the calling thread (then :meth:`sweep_once` does
        nothing). Returns how many containers were removed; a failed sweep removes none."""
        self._swept = True
        try:
            return self._gc_sync(None, True)
        except SandboxError as exc:  # a sweep that fails must not stop the backend's use
            logging.getLogger(__name__).warning("Docker start-up sweep failed: %s", exc)
            return 0

    def close(self) -> None:
        """Closes the SDK client and stops the thread pool (running calls finish). Idempotent."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        client, self._client = self._client, None
        if client is not None:
            client.close()

    async def sweep_once(self) -> None:
        """Runs :meth:`gc` (expired and orphaned sandboxes) the first time it is called."""
        if self._swept:
            return
        self._swept = True
        await self.gc()

    async def gc(self, *, run_id: str | None = None, expired_only: bool = True) -> int:
        """Removes containers labelled ``gymfleet.*`` that are expired or whose owner is dead
        (see :mod:`gymfleet.envs.sandbox.docker_gc`).

        Args:
            run_id: only containers of this run.
            expired_only: when False, remove every matching container, live owner or not.

        Returns:
            How many containers were removed.
        """
        return await self.run_blocking(self._gc_sync, run_id, expired_only)

    def _gc_sync(self, run_id: str | None, expired_only: bool) -> int:
        with docker_errors("remove stale sandboxes"):
            return reap(self.client(), run_id, expired_only)


