"""One Docker sandbox: a container, the commands run in it, and whose doing each failure was.

A command whose wrapper prints no frame is never run again: the container gone, stopped or
restarted from outside is :class:`SandboxLostError` (infrastructure); a container that runs on
unchanged means the command killed its own wrapper (``kill -9 -1``), and its result says so; a
wrapper Docker cannot even start is :class:`SandboxDamagedError` (``rm -rf /`` took bash), after
one restart when the sandbox was merely out of processes (a fork bomb: the command had not run).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import posixpath
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Self

from docker.models.containers import Container

from gymfleet.core.errors import SandboxError
from gymfleet.envs.errors import (
    SandboxClosedError,
    SandboxDamagedError,
    SandboxFileError,
    SandboxLostError,
)
from gymfleet.envs.sandbox.base import ExecResult, SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.docker_changes import changed_paths, outside
from gymfleet.envs.sandbox.docker_container import DockerHost, create_container
from gymfleet.envs.sandbox.docker_errors import (
    NOT_RERUN,
    ContainerState,
    docker_errors,
    explain_lost_frame,
    oom_damage,
)
from gymfleet.envs.sandbox.docker_exec import (
    EXEC_ROOT,
    KILL_SCRIPT,
    RESET_SCRIPT,
    SETUP_FAILED,
    head_tail_of,
    init_ticks,
    parse_frame,
    split_limit,
    wrapper_argv,
)
from gymfleet.envs.sandbox.docker_files import file_archive, file_errors, folder_archive, read_regular_file
from gymfleet.envs.sandbox.docker_layer import Layer
from gymfleet.envs.sandbox.docker_seal import copy_folder
from gymfleet.envs.sandbox.docker_seal import stop_processes as _stop_all
from gymfleet.envs.sandbox.docker_verifier import carry_changes, sort_container

log = logging.getLogger(__name__)

_KILLED_EXIT_CODE = 137  # 128 + SIGKILL, what bash reports for a killed child
_READ_BACK_MAX_BYTES = 64 << 20  # output of a killed wrapper read back whole: not beyond this
_MAX_ARGV_CMD_BYTES = 64 << 10  # Linux caps one argv string at 128 KiB: longer commands go by file
_START_AGAIN_AFTER_S = 1.0
"""Pause before starting a command Docker could not start once (a runc hiccup on a loaded host)."""
_OUT_OF_PROCESSES = ("resource temporarily unavailable", "cannot allocate memory")
_SELF_KILLED_NOTE = (
    "[gymfleet: the command killed the process running it (kill -9 -1?): the rest of its process "
    "group was killed; its output up to then is shown]\n")


_RESTARTED_NOTE = "[gymfleet: the sandbox was out of processes: it was restarted, killing every process in it]\n"


class _NoProcessError(Exception):
    """Docker could not start the wrapper at all: the command never ran."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.out_of_processes = any(word in reason.lower() for word in _OUT_OF_PROCESSES)


class DockerSandbox:
    """One container. Use as ``async with backend.create(spec, labels) as sb``."""

    def __init__(self, backend: DockerHost, spec: SandboxSpec, labels: SandboxLabels) -> None:
        self.spec = spec
        self.labels = labels
        self._backend = backend
        self._container: Container | None = None
        self._started_at = ""
        self._baseline: set[str] = set()
        self._closed = False
        self.withheld: dict[str, str] = {}
        """What of the agent's changes a fresh verifier sandbox was made without: path -> why."""

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
        with docker_errors("start a sandbox"):
            self._container, self._started_at = await self._backend.run_blocking(
                create_container, self._backend.client(), self.spec, self.labels, self._backend.storage)
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
        """Runs ``cmd`` with ``bash -c``; see :meth:`Sandbox.exec`. A command killed on timeout,
        or by itself, reports exit code 137.

        Raises:
            SandboxClosedError: after ``close()``.
            SandboxLostError: the container was removed, stopped or restarted from outside
                (the command is not run again).
            SandboxDamagedError: the sandbox can no longer start a command (the agent broke it).
            SandboxError: any other Docker failure.
        """
        container = self._live()
        async with self._oom_is_damage(container):
            return await self._exec(container, cmd, timeout_s, workdir, env)

    @contextlib.asynccontextmanager
    async def _oom_is_damage(self, container: Container) -> AsyncIterator[None]:
        """Turns "stopped from outside" into the policy's damage when Docker says the memory
        limit's OOM killer stopped the container (its files filled the memory, perhaps from a
        background command, noticed only by the next call)."""
        try:
            yield
        except SandboxLostError as lost:
            try:
                attrs = await self._backend.run_blocking(self._backend.client().api.inspect_container, container.id)
            except Exception:  # gone altogether: the loss stands
                raise lost from None
            damage = oom_damage(ContainerState.of(attrs), container.short_id)
            if damage is None:
                raise
            raise damage from lost

    async def _exec(
        self, container: Container, cmd: str, timeout_s: float, workdir: str | None, env: dict[str, str] | None
    ) -> ExecResult:
        try:
            return await self._attempt(container, cmd, timeout_s, workdir, env)
        except _NoProcessError as exc:
            if not exc.out_of_processes:
                return await self._start_again(container, cmd, timeout_s, workdir, env)
            reason = str(exc)
        # Out of processes (a fork bomb left running): the wrapper never started, so the command
        # never ran. A restart kills every process (files stay); then its first and only run.
        await self._restart(container)
        try:
            result = await self._attempt(container, cmd, timeout_s, workdir, env)
        except _NoProcessError as exc:
            raise self._damaged(f"{exc} (even after a restart)") from None
        note = f"[gymfleet: the sandbox could not start a process ({reason}); it was restarted, killing every process in it]\n"
        return dataclasses.replace(result, stderr=note + result.stderr)

    async def _start_again(
        self, container: Container, cmd: str, timeout_s: float, workdir: str | None, env: dict[str, str] | None
    ) -> ExecResult:
        """Docker could not start the wrapper, and not for want of processes. On a loaded host runc
        fails so now and then (``read init-p: connection reset by peer``, seen in the Harbor
        sweep on a no-op episode); the command never ran, so it is started once more after a
        pause. Failing again, the sandbox is damaged (bash removed, say): the agent's doing."""
        await asyncio.sleep(_START_AGAIN_AFTER_S)
        try:
            return await self._attempt(container, cmd, timeout_s, workdir, env)
        except _NoProcessError as exc:
            raise self._damaged(str(exc)) from None

    def _damaged(self, reason: str) -> SandboxDamagedError:
        short_id = self._container.short_id if self._container else "?"
        return SandboxDamagedError(
            f"sandbox {short_id} can no longer start a command (were bash or coreutils removed, or "
            f"/tmp filled, by the agent's commands?): {reason}")

    async def _attempt(
        self, container: Container, cmd: str, timeout_s: float, workdir: str | None, env: dict[str, str] | None
    ) -> ExecResult:
        """One run of ``cmd`` under the wrapper.

        Raises:
            _NoProcessError: Docker could not start the wrapper (the command did not run).
        """
        head_n, tail_n = split_limit(self.spec.max_output_bytes)
        exec_dir = f"{EXEC_ROOT}/{uuid.uuid4().hex}"
        if len(cmd.encode()) > _MAX_ARGV_CMD_BYTES:
            # its folder made 0777 with it: the copy API writes as root, the wrapper runs as the
            # image's user (which cannot remove the emptied folder from the sticky EXEC_ROOT:
            # a non-root image keeps one empty folder per such command)
            await self._put_folder(container, exec_dir, {"cmd.sh": cmd.encode()})
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
            return await self._result_from_files(container, exec_dir, duration_s, timed_out=True)
        if frame is None:
            return await self._lost_frame(container, exec_dir, raw, raw_err, duration_s)
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

    async def _lost_frame(
        self, container: Container, exec_dir: str, raw: bytes, raw_err: bytes, duration_s: float
    ) -> ExecResult:
        """Whose doing a missing frame was (see the module docstring).

        Docker's view of the container lags a kill by a moment, so the container itself is asked
        too: the kill script prints the start time of PID 1, which the wrapper printed first; a
        different one (or none, the container being down) means a restart from outside.
        """
        text = (raw_err or raw)[-500:].decode(errors="replace").strip()
        if SETUP_FAILED in raw:
            raise self._damaged(f"its command folder could not be made: {text}")
        before = init_ticks(raw)
        if before is None and ("exec failed" in text or "OCI runtime" in text):
            await self._blame_outside(container)  # Docker could not start the wrapper: why?
            if not any(word in text.lower() for word in ("not running", "stopped", "restarting", "paused")):
                raise _NoProcessError(text)
        deadline = time.monotonic() + self._backend.config.kill_grace_s
        while True:
            await self._blame_outside(container)
            try:
                out, _ = await asyncio.wait_for(self._kill_group(container, exec_dir), self._backend.config.kill_grace_s)
            except TimeoutError:
                out = b""
            now = init_ticks(out)
            if now is not None and before is not None and now != before:
                raise SandboxLostError(
                    f"sandbox {container.short_id} was restarted from outside mid-command (every "
                    f"process in it died); {NOT_RERUN}")
            if now is not None:  # PID 1 unchanged: the command killed its own wrapper
                return await self._result_from_files(container, exec_dir, duration_s, timed_out=False,
                                                     note=_SELF_KILLED_NOTE)
            if _NoProcessError(out.decode(errors="replace")).out_of_processes:
                # ...and left the sandbox out of processes: output first, then a restart
                result = await self._result_from_files(container, exec_dir, duration_s, timed_out=False,
                                                       note=_SELF_KILLED_NOTE + _RESTARTED_NOTE)
                await self._restart(container)
                return result
            if time.monotonic() > deadline:
                raise SandboxLostError(
                    f"sandbox {container.short_id} stopped answering mid-command ({text or 'no output'}); "
                    f"{NOT_RERUN}")
            await asyncio.sleep(0.2)

    async def _blame_outside(self, container: Container) -> None:
        """Raises the outside's failure when Docker already shows one (gone, stopped, restarted)."""
        with docker_errors("look at the sandbox after a command ended without a result", container.short_id):
            attrs = await self._backend.run_blocking(self._backend.client().api.inspect_container, container.id)
        state = ContainerState.of(attrs)
        blame = explain_lost_frame(state, self._started_at, container.short_id)
        if blame is not None:
            self._started_at = state.started_at  # a restarted sandbox may be looked at again
            raise blame

    async def _restart(self, container: Container) -> None:
        """Restarts the container (every process dies, files stay) and notes its new start."""
        client = self._backend.client()
        with docker_errors("restart the sandbox", container.short_id):
            await self._backend.run_blocking(container.restart, timeout=0)
            attrs = await self._backend.run_blocking(client.api.inspect_container, container.id)
        self._started_at = ContainerState.of(attrs).started_at

    def _exec_sync(self, container: Container, argv: list[str], env: dict[str, str] | None) -> tuple[bytes, bytes]:
        api = self._backend.client().api
        with docker_errors("run a command", container.short_id):
            # workdir "/": an agent that removed the spec's workdir must not stop exec itself
            exec_id = api.exec_create(container.id, argv, environment=env or None, workdir="/")["Id"]
            out, err = api.exec_start(exec_id, demux=True)
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

    async def _kill_group(self, container: Container, exec_dir: str) -> tuple[bytes, bytes]:
        argv = ["bash", "-c", KILL_SCRIPT, "kill", exec_dir]
        return await self._backend.run_blocking(self._exec_sync, container, argv, None)

    async def _result_from_files(
        self, container: Container, exec_dir: str, duration_s: float, *, timed_out: bool, note: str = ""
    ) -> ExecResult:
        """The result of a command whose wrapper died with it: output read back by file copy."""
        streams = []
        for name in ("out", "err"):
            path = f"{exec_dir}/{name}"
            try:
                with file_errors("read", path, container.short_id):
                    streams.append(await self._backend.run_blocking(read_regular_file, container, path, _READ_BACK_MAX_BYTES))
            except SandboxLostError:
                raise
            except (SandboxError, SandboxDamagedError):
                streams.append(b"")
        return ExecResult(
            exit_code=_KILLED_EXIT_CODE,
            stdout=head_tail_of(streams[0], self.spec.max_output_bytes),
            stderr=note + head_tail_of(streams[1], self.spec.max_output_bytes),
            duration_s=duration_s,
            timed_out=timed_out,
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
        argv = ["bash", "-c", RESET_SCRIPT, "reset", self.spec.workdir, EXEC_ROOT]
        try:
            out, _ = await asyncio.wait_for(self._backend.run_blocking(self._exec_sync, container, argv, None), 60)
            with docker_errors("list the sandbox's changed files", container.short_id):
                changed = await self._backend.run_blocking(changed_paths, container)
        except (TimeoutError, SandboxError):
            return False
        if b"OCI runtime" in out:  # the reset itself could not start: a broken sandbox
            return False
        left = outside(changed - self._baseline, (self.spec.workdir, "/tmp", EXEC_ROOT))
        if left:
            log.info("sandbox %s changed %d paths outside its workdir and /tmp (%s...): not reused",
                     container.short_id, len(left), left[0])
        return not left

    async def stop_processes(self) -> list[str]:
        """Kills every process but PID 1, checked from the host (``envs/sandbox/docker_seal.py``).

        Returns:
            The command lines of the processes that were alive, as the host saw them.

        Raises:
            SandboxDamagedError: some process outlived the kill.
            SandboxError: Docker failed.
        """
        container = self._live()
        async with self._oom_is_damage(container):
            return await _stop_all(self._backend, container)

    async def verifier(self, carry_changes: bool = False) -> DockerSandbox:
        """Where a verifier runs; see :meth:`Sandbox.verifier`. Call after :meth:`stop_processes`.

        Without ``carry_changes``: this sandbox when its writable layer changed nowhere outside the
        workdir, ``/tmp`` and the commands' output folder since it started, else a fresh sandbox
        of the same spec (the caller closes it) holding a copy of the workdir. With it: this
        sandbox when none of its changes touches the verifier's tools, else a fresh one holding
        every change but those (``envs/sandbox/docker_verifier.py``; what was kept out is its
        :attr:`withheld`), made only after every process here is stopped.

        Raises:
            SandboxError: Docker failed, or the fresh sandbox did not start.
        """
        container = self._live()
        async with self._oom_is_damage(container):
            with docker_errors("list the sandbox's changed files", container.short_id):
                if carry_changes:
                    await self._backend.run_blocking(container.reload)
                    layer = Layer.of(container)
                    if layer is not None:
                        return await self._carrying_verifier(container, layer)
                changed = await self._backend.run_blocking(changed_paths, container)
        if not outside(changed - self._baseline, (self.spec.workdir, "/tmp", EXEC_ROOT)):
            return self
        fresh = await self._fresh(container, lambda target: copy_folder(container, target, self.spec.workdir))
        fresh.withheld = {"/": "the sandbox's layer is not readable here: only the workdir is copied"} if carry_changes else {}
        return fresh

    async def _fresh(self, container: Container, fill: Callable[[Container], None]) -> DockerSandbox:
        fresh = DockerSandbox(self._backend, self.spec, self.labels)
        try:
            await fresh.start()
            with docker_errors("copy the agent's files to the verifier's sandbox", container.short_id):
                await self._backend.run_blocking(fill, fresh._live())
        except BaseException:
            await fresh.close()
            raise
        return fresh

    async def _carrying_verifier(self, container: Container, layer: Layer) -> DockerSandbox:
        sorting = await self._backend.run_blocking(sort_container, container, layer, self.spec.workdir)
        if not sorting.dropped and not sorting.shadow:
            return self
        await self.stop_processes()  # nothing may write while the changes are copied
        fresh = await self._fresh(container, lambda target: None)
        try:
            await carry_changes(fresh, fresh._live(), container, sorting, self._backend.run_blocking)
        except BaseException:
            await fresh.close()
            raise
        fresh.withheld = sorting.dropped
        log.info("sandbox %s: the verifier runs in a fresh sandbox without %d changed paths (%s)",
                 container.short_id, len(sorting.dropped), ", ".join(list(sorting.dropped)[:5]))
        return fresh

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Writes ``data`` to ``path`` (relative to ``spec.workdir``), creating parent folders.

        Raises:
            SandboxFileError: the file could not be written (a parent is a file, read-only).
            SandboxDamagedError: the sandbox's space there is full (the agent filled it).
            SandboxLostError: the container is gone.
        """
        container, target = self._live(), self._path(path)
        async with self._oom_is_damage(container):
            await self._put(container, target, data, mode)

    async def _put_folder(self, container: Container, folder: str, files: dict[str, bytes]) -> None:
        async with self._oom_is_damage(container):
            with file_errors("write", folder, container.short_id):
                ok = await self._backend.run_blocking(container.put_archive, "/", folder_archive(folder, 0o777, files))
            if not ok:
                raise SandboxFileError(f"could not write {folder} in the sandbox")

    async def _put(self, container: Container, target: str, data: bytes, mode: int) -> None:
        with file_errors("write", target, container.short_id):
            ok = await self._backend.run_blocking(container.put_archive, "/", file_archive(target, data, mode))
        if not ok:
            raise SandboxFileError(f"could not write {target} in the sandbox")

    async def get_file(self, path: str) -> bytes:
        """Reads the regular file at ``path`` (relative to ``spec.workdir``).

        Raises:
            SandboxFileError: no such file, or not a regular file.
            SandboxLostError: the container is gone.
        """
        container, target = self._live(), self._path(path)
        async with self._oom_is_damage(container):
            with file_errors("read", target, container.short_id):
                return await self._backend.run_blocking(read_regular_file, container, target)

    async def close(self) -> None:
        """Kills and removes the container and its volumes. Idempotent; a container already gone
        is fine."""
        if self._closed:
            return
        self._closed = True
        container, self._container = self._container, None
        if container is None:
            return
        with contextlib.suppress(SandboxLostError), docker_errors("remove the sandbox", container.short_id):
            await self._backend.run_blocking(container.remove, force=True, v=True)
