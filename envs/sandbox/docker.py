"""The Docker sandbox backend: one container per sandbox, driven through the docker SDK.

A container (:mod:`~gymfleet.envs.sandbox.docker_container`) idles under Docker's init with the
spec's CPU, memory and pids limits, no network unless the spec asks, and ``gymfleet.*`` labels
(run, rollout, expiry, owner pid, host) so that :meth:`DockerBackend.gc` can find what nobody
owns. Commands run through the wrapper of
:mod:`gymfleet.envs.sandbox.docker_exec`. The SDK blocks, so every call runs in the backend's
thread pool (sized for many concurrent sandboxes, unlike asyncio's default of cores + 4).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import posixpath
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, TypeVar

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container

from gymfleet.core.strict import StrictModel
from gymfleet.envs.errors import (
    SandboxClosedError,
    SandboxError,
    SandboxFileError,
    SandboxUnavailableError,
)
from gymfleet.envs.sandbox.base import ExecResult, SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.docker_changes import changed_paths, outside
from gymfleet.envs.sandbox.docker_container import create_container
from gymfleet.envs.sandbox.docker_exec import (
    EXEC_ROOT,
    KILL_SCRIPT,
    RESET_SCRIPT,
    head_tail_of,
    parse_frame,
    split_limit,
    wrapper_argv,
)
from gymfleet.envs.sandbox.docker_files import file_archive, file_errors, read_regular_file
from gymfleet.envs.sandbox.docker_gc import reap

T = TypeVar("T")


class _WrapperFailedError(Exception):
    """The exec wrapper printed no exit code (no process could start, or bash is gone)."""


_KILLED_EXIT_CODE = 137  # 128 + SIGKILL, what bash reports for a killed child
_READ_BACK_MAX_BYTES = 64 << 20  # output of a killed wrapper read back whole: not beyond this
_MAX_ARGV_CMD_BYTES = 64 << 10  # Linux caps one argv string at 128 KiB: longer commands go by file


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
    """Makes :class:`DockerSandbox` es; sweeps orphans once, before its first sandbox starts."""

    name = "docker"

    def __init__(self, config: DockerBackendConfig | None = None) -> None:
        self.config = config or DockerBackendConfig()
        self._client: docker.DockerClient | None = None
        self._executor = ThreadPoolExecutor(self.config.max_threads, thread_name_prefix="gymfleet-docker")
        self._swept = False

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
        with _docker_errors("remove stale sandboxes"):
            return reap(self.client(), run_id, expired_only)


@contextlib.contextmanager
def _docker_errors(doing: str) -> Iterator[None]:
    """Turns SDK and transport errors into :class:`SandboxError` s that say what failed."""
    try:
        yield
    except (docker.errors.NotFound, SandboxError):
        raise
    except docker.errors.DockerException as exc:  # before RequestException: APIError is both
        raise SandboxError(f"Docker failed to {doing}: {exc}") from exc
    except requests.exceptions.RequestException as exc:
        raise SandboxUnavailableError(
            f"Docker daemon stopped answering while trying to {doing} ({exc}): restart it "
            "(`make services`) or pass --sandbox local"
        ) from exc


class DockerSandbox:
    """One container. Use as ``async with backend.create(spec, labels) as sb``."""

    def __init__(self, backend: DockerBackend, spec: SandboxSpec, labels: SandboxLabels) -> None:
        self.spec = spec
        self.labels = labels
        self._backend = backend
        self._container: Container | None = None
        self._baseline: set[str] = set()
        self._closed = False

    @property
    def isolated(self) -> bool:
        """Always True: commands run in a container."""
        return True

    @property
    def container_id(self) -> str | None:
        """The container's id once started."""
        return self._container.id if self._container else None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Creates and starts the container (sweeping orphans first, once per backend).

        Raises:
            SandboxUnavailableError: no Docker daemon answers.
            SandboxStartError: the image is missing or the limits were refused.
        """
        if self._closed:
            raise SandboxClosedError("this sandbox was closed; create a new one")
        if self._container is not None:
            return
        await self._backend.sweep_once()
        self.labels = self.labels.with_expiry(self.spec.ttl_s)
        self._container = await self._backend.run_blocking(
            create_container, self._backend.client(), self.spec, self.labels
        )
        self._baseline = await self._backend.run_blocking(changed_paths, self._container)

    def _live(self) -> Container:
        if self._closed:
            raise SandboxClosedError("this sandbox was closed; create a new one")
        if self._container is None:
            raise SandboxError("sandbox not started: use `async with` or call start() first")
        return self._container

    def _path(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.spec.workdir, path))

    async def exec(
        self,
        cmd: str,
        timeout_s: float = 60.0,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Runs ``cmd`` with ``bash -c``; see :meth:`Sandbox.exec`. A command killed on timeout
        reports exit code 137.

        Raises:
            SandboxClosedError: after ``close()``.
            SandboxError: the container is gone or cannot run bash any more.
        """
        container = self._live()
        try:
            return await self._attempt(container, cmd, timeout_s, workdir, env)
        except _WrapperFailedError as exc:
            reason = str(exc)
        # No process could start (a fork bomb left running) or the rootfs is broken: restart
        # the container (every process dies, files stay) and try once more.
        await self._restart(container)
        try:
            result = await self._attempt(container, cmd, timeout_s, workdir, env)
        except _WrapperFailedError as exc:
            raise SandboxError(
                f"sandbox {container.short_id} could not run the command wrapper, even after a "
                f"restart (were bash or coreutils removed from the image?): {exc}"
            ) from None
        note = f"[gymfleet: the sandbox could not start a process ({reason}); it was restarted, killing every process in it]\n"
        return dataclasses.replace(result, stderr=note + result.stderr)

    async def _attempt(
        self, container: Container, cmd: str, timeout_s: float, workdir: str | None, env: dict[str, str] | None
    ) -> ExecResult:
        """One run of ``cmd`` under the wrapper.

        Raises:
            _WrapperFailedError: the wrapper did not even report an exit code.
        """
        head_n, tail_n = split_limit(self.spec.max_output_bytes)
        exec_dir = f"{EXEC_ROOT}/{uuid.uuid4().hex}"
        if len(cmd.encode()) > _MAX_ARGV_CMD_BYTES:
            await self.put_file(f"{exec_dir}/cmd.sh", cmd.encode())
            cmd = f". {exec_dir}/cmd.sh"
        argv = wrapper_argv(exec_dir, self._path(workdir or "."), head_n, tail_n, cmd)
        started = time.monotonic()
        run = asyncio.ensure_future(self._backend.run_blocking(self._exec_sync, container, argv, env))
        timed_out = False
        try:
            raw, raw_err = await asyncio.wait_for(asyncio.shield(run), timeout_s)
        except TimeoutError:
            timed_out = True
            raw, raw_err = await self._stop(container, exec_dir, run)
        except asyncio.CancelledError:  # the caller gave up: so does the command
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._kill_group(container, exec_dir), self._backend.config.kill_grace_s)
            raise
        duration_s = time.monotonic() - started
        frame = parse_frame(raw, head_n, tail_n)
        if frame is None and timed_out:
            return await self._result_from_files(container, exec_dir, duration_s)
        if frame is None:
            raise _WrapperFailedError((raw_err or raw)[-300:].decode(errors="replace").strip())
        stderr = frame.stderr
        if not frame.sizes_known:
            stderr = f"[gymfleet: output lost, the sandbox's coreutils are gone: {raw_err[-300:]!r}]"
        return ExecResult(
            exit_code=frame.exit_code,
            stdout=frame.stdout,
            stderr=stderr,
            duration_s=duration_s,
            timed_out=timed_out,
            stdout_bytes=frame.stdout_bytes,
            stderr_bytes=frame.stderr_bytes,
        )

    async def _restart(self, container: Container) -> None:
        with _docker_errors(f"restart sandbox {container.short_id}"):
            await self._backend.run_blocking(container.restart, timeout=0)

    def _exec_sync(self, container: Container, argv: list[str], env: dict[str, str] | None) -> tuple[bytes, bytes]:
        api = self._backend.client().api
        with _docker_errors(f"run a command in sandbox {container.short_id}"):
            try:
                exec_id = api.exec_create(container.id, argv, environment=env or None)["Id"]
                out, err = api.exec_start(exec_id, demux=True)
            except docker.errors.NotFound as exc:
                raise SandboxError(f"sandbox container {container.short_id} is gone: {exc}") from exc
        return out or b"", err or b""

    async def _stop(
        self, container: Container, exec_dir: str, run: asyncio.Future[tuple[bytes, bytes]]
    ) -> tuple[bytes, bytes]:
        """Kills a timed-out command's process group and collects what its wrapper printed.

        When the group cannot be killed from inside (a fork bomb leaves no pid to exec with) the
        container is restarted: every process dies, the filesystem stays.
        """
        grace_s = self._backend.config.kill_grace_s
        try:
            await asyncio.wait_for(self._kill_group(container, exec_dir), grace_s)
            return await asyncio.wait_for(asyncio.shield(run), grace_s)
        except (TimeoutError, SandboxError):
            pass
        await self._restart(container)
        try:
            return await asyncio.wait_for(run, grace_s)
        except (TimeoutError, SandboxError):
            return b"", b""

    async def _kill_group(self, container: Container, exec_dir: str) -> None:
        argv = ["bash", "-c", KILL_SCRIPT, "kill", exec_dir]
        await self._backend.run_blocking(self._exec_sync, container, argv, None)

    async def _result_from_files(self, container: Container, exec_dir: str, duration_s: float) -> ExecResult:
        """The result of a command whose wrapper died with it: output read back by file copy."""
        streams = []
        for name in ("out", "err"):
            path = f"{exec_dir}/{name}"
            try:
                with file_errors("read", path):
                    streams.append(await self._backend.run_blocking(read_regular_file, container, path, _READ_BACK_MAX_BYTES))
            except SandboxError:
                streams.append(b"")
        return ExecResult(
            exit_code=_KILLED_EXIT_CODE,
            stdout=head_tail_of(streams[0], self.spec.max_output_bytes),
            stderr=head_tail_of(streams[1], self.spec.max_output_bytes),
            duration_s=duration_s,
            timed_out=True,
            stdout_bytes=len(streams[0]),
            stderr_bytes=len(streams[1]),
        )

    async def reset(self) -> bool:
        """Makes the sandbox fresh for a pool's next user: kills every process the commands
        started and empties the workdir and /tmp. False when that fails, or when anything else
        in the filesystem changed since the start (a root command can write anywhere): such a
        sandbox is not fit for another rollout.

        Raises:
            SandboxClosedError: after ``close()``.
        """
        container = self._live()
        argv = ["bash", "-c", RESET_SCRIPT, "reset", self.spec.workdir]
        try:
            await asyncio.wait_for(self._backend.run_blocking(self._exec_sync, container, argv, None), 60)
            changed = await self._backend.run_blocking(changed_paths, container)
        except (TimeoutError, SandboxError, docker.errors.DockerException):
            return False
        left = outside(changed - self._baseline, (self.spec.workdir, "/tmp"))
        if left:
            logging.getLogger(__name__).info("sandbox %s changed %d paths outside its workdir and "
                                             "/tmp (%s...): not reused", container.short_id, len(left), left[0])
        return not left

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Writes ``data`` to ``path`` (relative to ``spec.workdir``), creating parent folders.

        Raises:
            SandboxFileError: the file could not be written (a parent is a file, read-only).
        """
        container, target = self._live(), self._path(path)
        with file_errors("write", target):
            ok = await self._backend.run_blocking(container.put_archive, "/", file_archive(target, data, mode))
        if not ok:
            raise SandboxFileError(f"could not write {target} in the sandbox")

    async def get_file(self, path: str) -> bytes:
        """Reads the regular file at ``path`` (relative to ``spec.workdir``).

        Raises:
            SandboxFileError: no such file, or not a regular file.
        """
        container, target = self._live(), self._path(path)
        with file_errors("read", target):
            return await self._backend.run_blocking(read_regular_file, container, target)

    async def close(self) -> None:
        """Kills and removes the container. Idempotent; a container already gone is fine."""
        if self._closed:
            return
        self._closed = True
        container, self._container = self._container, None
        if container is None:
            return
        with contextlib.suppress(docker.errors.NotFound), _docker_errors(f"remove sandbox {container.short_id}"):
            await self._backend.run_blocking(container.remove, force=True, v=True)
