"""One local sandbox: its host folder, its agent process (under bubblewrap or not), its calls.

Made by :class:`~gymfleet.envs.sandbox.local.LocalBackend`, which decides how it launches
(:class:`Launch`). Host folder layout: ``work/`` (bound at ``spec.workdir``), ``ctl/`` (bound at
``/.gymfleet``: the agent script, command output files, file transfers), ``agent.log``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import posixpath
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from gymfleet.core.errors import SandboxError
from gymfleet.envs.errors import (
    SandboxClosedError,
    SandboxDamagedError,
    SandboxFileError,
    SandboxStartError,
    SandboxUnavailableError,
)
from gymfleet.envs.sandbox import local_agent
from gymfleet.envs.sandbox.base import ExecResult, SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.local_cgroup import MemoryCgroups, oom_kills
from gymfleet.envs.sandbox.local_channel import AgentChannel
from gymfleet.envs.sandbox.local_uids import UidLease, lease_uid
from gymfleet.envs.sandbox.local_state import (
    MARKER_ENV,
    SandboxRecord,
    process_start_ticks,
    reap,
    write_record,
)
from gymfleet.envs.sandbox.output import capture_file

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
AGENT_GRACE_S = 30.0
"""Seconds the host waits for the agent's reply beyond a command's own timeout."""
FILE_TIMEOUT_S = 120.0
CLOSE_WAIT_S = 2.0


@dataclass(frozen=True)
class Launch:
    """How the backend starts a sandbox's agent."""

    isolated: bool
    allowed: bool
    """False when neither bubblewrap works nor the unisolated fallback is allowed."""
    state_dir: Path
    tmp_dir: str | None
    python: str
    bwrap_prefix: list[str]
    tmpfs_binds: list[str]
    """Binds that must follow the sandbox's tmpfs on /tmp (host folders under /tmp)."""
    uid_range: tuple[int, int] | None
    """(first uid, how many) to lend one from, when gymfleet runs as root; else None."""
    uid_lock_dir: Path
    path_env: str
    ctl_mount: str
    cgroups: MemoryCgroups | None = None
    """Memory cgroups for the sandboxes (counting their tmpfs files), when available."""


class LocalSandbox:
    """A sandbox on this machine; see :mod:`gymfleet.envs.sandbox.local`.

    Use as ``async with backend.create(spec) as sb``. Implements
    :class:`~gymfleet.envs.sandbox.base.Sandbox`, plus :meth:`reset` for pools. Several
    ``exec`` calls may run at once. Any event loop may drive it (one at a time).

    Lifetime: the sandbox dies with the *thread* that started it (``--die-with-parent`` follows
    the forking thread), so start it from a long-lived thread, e.g. the event loop's, not from
    a short-lived worker thread.
    """

    reset_runs_a_command = True
    """:meth:`reset` empties the folders with a bash run as the sandbox's user and fails when it
    fails: the pool needs no ``true`` after it."""

    def __init__(self, spec: SandboxSpec, labels: SandboxLabels, launch: Launch) -> None:
        self.spec = spec
        self.labels = labels
        self.sandbox_id = f"{_slug(labels.rollout_id)}-{uuid.uuid4().hex[:8]}"
        self._launch = launch
        self._proc: subprocess.Popen[bytes] | None = None
        self._channel: AgentChannel | None = None
        self._host_dir: Path | None = None
        self._record: SandboxRecord | None = None
        self._uid: UidLease | None = None
        self._closed = False

    @property
    def isolated(self) -> bool:
        """False for the plain-subprocess fallback, which can touch the host."""
        return self._launch.isolated

    @property
    def host_dir(self) -> Path | None:
        """The host folder of this sandbox (None before start)."""
        return self._host_dir

    async def start(self) -> None:
        """Creates the host folder and starts the agent. See the Sandbox protocol."""
        if not self._launch.allowed:
            raise SandboxUnavailableError(
                "bubblewrap does not work here and the unisolated fallback is off: install "
                "bubblewrap (apt-get install bubblewrap) or set GYMFLEET_ALLOW_UNISOLATED=1"
            )
        if self._closed:
            raise SandboxClosedError(f"sandbox {self.sandbox_id} was closed; create a new one")
        if self._proc is not None:
            return
        if not self.isolated:
            log.warning(
                "UNISOLATED local sandbox %s: bubblewrap is unavailable, commands run as plain "
                "subprocesses of this host with its permissions", self.sandbox_id)
        workdir = posixpath.normpath(self.spec.workdir)
        if not posixpath.isabs(workdir) or workdir == "/" or workdir == self._launch.ctl_mount:
            raise SandboxStartError(
                f"spec.workdir {self.spec.workdir!r} cannot be a sandbox's workdir: give an "
                "absolute folder other than / (e.g. /app)")
        try:
            self._prepare_host_dir()
            self._spawn()
            await self._request("ping", START_TIMEOUT_S)
        except (OSError, SandboxError) as exc:
            detail = self._agent_log()
            await self.close()
            raise SandboxStartError(
                f"local sandbox {self.sandbox_id} did not start: {exc}. {detail}".strip()
            ) from exc
        except BaseException:  # cancelled while starting: leave nothing behind
            await self.close()
            raise

    async def exec(
        self,
        cmd: str,
        timeout_s: float = 60.0,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Runs ``bash -c cmd``; see :meth:`gymfleet.envs.sandbox.base.Sandbox.exec`."""
        self._require_open()
        cwd = self._inside_path(workdir or ".", what="workdir")
        rid = uuid.uuid4().hex
        started = time.monotonic()
        command_env = {**self._base_env(), **self.spec.env, **(env or {})}
        try:
            reply = await self._request(
                "exec", timeout_s + AGENT_GRACE_S, rid=rid,
                cmd=cmd, cwd=cwd, env=command_env, timeout_s=timeout_s,
                keep_bytes=self.spec.max_output_bytes)
        except asyncio.CancelledError:  # the caller gave up: so does the command
            if self._channel is not None and not self._closed:
                self._channel.notify("cancel", target=rid)
            raise
        if "error" in reply:
            return ExecResult(126, "", f"gymfleet: cannot run the command: {reply['error']}\n",
                              time.monotonic() - started)
        return self._exec_result(rid, reply)

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Writes ``data`` at ``path`` (relative to ``spec.workdir``), parents created.

        Raises:
            SandboxFileError: the file could not be written, or the path is refused.
        """
        self._require_open()
        target = self._inside_path(path, what="path")
        blob = self._ctl_host() / f"{uuid.uuid4().hex}.in"
        try:
            await asyncio.to_thread(blob.write_bytes, data)
            blob.chmod(0o644)
            reply = await self._request("put", FILE_TIMEOUT_S, path=target,
                                        src=self._ctl_inside(blob.name), mode=mode)
        finally:
            blob.unlink(missing_ok=True)
        if "error" in reply:
            raise SandboxFileError(f"cannot write {path!r} in sandbox {self.sandbox_id}: "
                                   f"{reply['error']}")

    async def get_file(self, path: str) -> bytes:
        """Reads the file at ``path`` (relative to ``spec.workdir``).

        Raises:
            SandboxFileError: no such file, not a regular file, or the path is refused.
        """
        self._require_open()
        source = self._inside_path(path, what="path")
        name = f"{uuid.uuid4().hex}.get"
        blob = self._ctl_host() / name
        try:
            reply = await self._request("get", FILE_TIMEOUT_S, path=source,
                                        dst=self._ctl_inside(name))
            if "error" in reply:
                raise SandboxFileError(f"cannot read {path!r} in sandbox {self.sandbox_id}: "
                                       f"{reply['error']}")
            return await asyncio.to_thread(blob.read_bytes)
        finally:
            blob.unlink(missing_ok=True)

    async def stop_processes(self) -> list[str]:
        """Kills every process the commands started, daemons included (the root agent scans the
        sandbox's pid namespace until none is left).

        Returns:
            The command lines of the processes that were alive, as the agent saw them.

        Raises:
            SandboxDamagedError: some process outlived the kill.
            SandboxError: the agent failed.
        """
        self._require_open()
        reply = await self._request("stop", FILE_TIMEOUT_S)
        if "error" in reply:
            raise SandboxError(f"sandbox {self.sandbox_id} could not stop its processes: {reply['error']}")
        if reply["left"]:
            raise SandboxDamagedError(f"sandbox {self.sandbox_id}: {reply['left']} processes outlived "
                                      "SIGKILL: it cannot be graded")
        return list(reply["killed"])

    async def verifier(self, carry_changes: bool = False) -> LocalSandbox:
        """This sandbox: the tools a verifier runs are the host's, bound read-only (only the
        workdir and /tmp are writable), so nothing the agent wrote reaches them; with or without
        ``carry_changes`` (there are no other changes to carry)."""
        self._require_open()
        return self

    async def reset(self) -> bool:
        """Kills every process the commands started and empties the workdir and /tmp.

        Returns:
            True when the sandbox answered and is fit for another user.
        """
        try:
            self._require_open()
            reply = await self._request("reset", FILE_TIMEOUT_S, workdir=self._inside_path("."))
        except SandboxError:
            return False
        return "error" not in reply

    async def close(self) -> None:
        """Kills everything in the sandbox and removes its folder. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._channel is not None:
            self._channel.close()
        proc, self._proc = self._proc, None
        if proc is not None:
            await _stop(proc)
        if self._record is not None:
            await asyncio.to_thread(reap, self._launch.state_dir, self._record)
        elif self._host_dir is not None:
            shutil.rmtree(self._host_dir, ignore_errors=True)
        if self._uid is not None:
            self._uid.release()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- helpers -------------------------------------------------------------------------------

    def _require_open(self) -> None:
        if self._closed:
            raise SandboxClosedError(f"sandbox {self.sandbox_id} was closed; create a new one")
        if self._channel is None or self._host_dir is None:
            raise SandboxError(f"sandbox {self.sandbox_id} is not started: use `async with`")

    async def _request(self, op: str, wait_s: float, rid: str | None = None,
                       **fields: Any) -> dict[str, Any]:
        if self._closed:
            raise SandboxClosedError(f"sandbox {self.sandbox_id} was closed; create a new one")
        if self._channel is None:
            raise SandboxError(f"sandbox {self.sandbox_id} is not started: use `async with`")
        try:
            return await self._channel.request(rid or uuid.uuid4().hex, op, wait_s, **fields)
        except SandboxError as exc:
            cgroup = Path(self._record.cgroup) if self._record and self._record.cgroup else None
            if cgroup is not None and oom_kills(cgroup):  # its own files and processes filled it
                raise SandboxDamagedError(
                    f"sandbox {self.sandbox_id} ran out of memory until its agent was killed (files "
                    f"in /tmp and the workdir count against memory_mb={self.spec.memory_mb}): {exc}"
                ) from exc
            raise

    def _exec_result(self, rid: str, reply: dict[str, Any]) -> ExecResult:
        limit = self.spec.max_output_bytes
        streams = []
        for suffix in ("out", "err"):
            path = self._ctl_host() / f"{rid}.{suffix}"
            try:
                streams.append(capture_file(path, limit))
            except OSError:
                streams.append(("", 0))
            path.unlink(missing_ok=True)
        (stdout, n_out), (stderr, n_err) = streams
        if reply.get("note"):
            stderr = f"{reply['note']}\n{stderr}"
        return ExecResult(
            exit_code=int(reply["exit_code"]), stdout=stdout, stderr=stderr,
            duration_s=float(reply["duration_s"]), timed_out=bool(reply["timed_out"]),
            stdout_bytes=n_out, stderr_bytes=n_err)

    def _prepare_host_dir(self) -> None:
        host_dir = Path(tempfile.mkdtemp(prefix=f"gymfleet-sb-{self.sandbox_id}-",
                                         dir=self._launch.tmp_dir))
        self._host_dir = host_dir
        for sub in ("work", "ctl", "home"):
            (host_dir / sub).mkdir()
        shutil.copyfile(local_agent.__file__, host_dir / "ctl" / "local_agent.py")
        if self._launch.uid_range is not None:
            self._uid = lease_uid(self._launch.uid_lock_dir, *self._launch.uid_range)
            uid = self._uid.uid
            os.chown(host_dir / "work", uid, uid)
            _write_user_files(host_dir, uid)
        self._record = SandboxRecord(
            sandbox_id=self.sandbox_id, run_id=self.labels.run_id,
            rollout_id=self.labels.rollout_id, expires_at=self.labels.expires_at,
            owner_pid=os.getpid(), owner_start_ticks=process_start_ticks(os.getpid()),
            host_dir=str(host_dir), host=socket.gethostname())
        write_record(self._launch.state_dir, self._record)

    def _spawn(self) -> None:
        assert self._host_dir is not None and self._record is not None
        launch = self._launch
        config = {
            "ctl": self._ctl_inside(""), "own_pid_ns": launch.isolated,
            "nproc": self.spec.pids_limit if launch.isolated else 0,
            "data_bytes": self.spec.memory_mb * 1024 * 1024,
            "clear_dirs": ["/tmp", "/var/tmp", "/root"] if launch.isolated else [],  # /root: HOME
            "uid": self._uid.uid if self._uid else None,
            "chown": [posixpath.normpath(self.spec.workdir)] if launch.isolated and self._uid else [],
        }
        # -I -S: the agent is stdlib-only; skipping site and user paths saves ~5 ms a start
        argv = [launch.python, "-I", "-S", self._ctl_inside("local_agent.py"), json.dumps(config)]
        procs_fd: int | None = None
        if launch.isolated:
            argv = [*launch.bwrap_prefix, *self._bwrap_binds(), "--", *argv]
            cgroup = launch.cgroups.create(self.sandbox_id, self.spec.memory_mb << 20) if launch.cgroups else None
            if cgroup is not None:
                self._record.cgroup = str(cgroup)
                # The agent joins its cgroup itself, overlapping the move (~12 ms of kernel wait)
                # with its start-up: then it and every command and file copy it runs charge their
                # memory and tmpfs pages there.
                procs_fd = os.open(cgroup / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
                argv.append(str(procs_fd))
        try:
            with open(self._host_dir / "agent.log", "wb") as agent_log:
                self._proc = subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=agent_log,
                    cwd=None if launch.isolated else self._host_dir / "work",
                    env=self._base_env(), start_new_session=True,
                    pass_fds=() if procs_fd is None else (procs_fd,))
        finally:
            if procs_fd is not None:
                os.close(procs_fd)
        self._channel = AgentChannel(self._proc, f"sandbox {self.sandbox_id}")
        self._record.agent_pid = self._proc.pid
        self._record.agent_start_ticks = process_start_ticks(self._proc.pid)
        write_record(launch.state_dir, self._record)

    def _bwrap_binds(self) -> list[str]:
        assert self._host_dir is not None
        disk_size = str(self.spec.disk_mb << 20)
        args = [] if self.spec.network else ["--unshare-net"]
        if self._uid is not None:
            args += ["--ro-bind", str(self._host_dir / "passwd"), "/etc/passwd",
                     "--ro-bind", str(self._host_dir / "group"), "/etc/group"]
        return args + [
            "--perms", "01777", "--size", disk_size, "--tmpfs", "/tmp", *self._launch.tmpfs_binds,
            "--perms", "0755" if self._uid else "01777", "--size", disk_size, "--tmpfs", self.spec.workdir,
            "--bind", str(self._host_dir / "ctl"), self._launch.ctl_mount,
            "--chdir", self.spec.workdir,
        ]

    def _base_env(self) -> dict[str, str]:
        assert self._host_dir is not None
        isolated = self._launch.isolated
        return {
            "PATH": self._launch.path_env,
            "HOME": "/root" if isolated else str(self._host_dir / "home"),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",  # output printed before a timeout is kept
            "GYMFLEET_WORKDIR": self._inside_path("."),
            MARKER_ENV: self.sandbox_id,
        }

    def _inside_path(self, path: str, what: str = "path") -> str:
        """``path`` (relative to ``spec.workdir``) as the agent sees it.

        Raises:
            SandboxFileError: unisolated, and the path leaves the workdir.
        """
        full = posixpath.normpath(posixpath.join(self.spec.workdir, path))
        if self.isolated:
            return full
        assert self._host_dir is not None
        rel = posixpath.relpath(full, posixpath.normpath(self.spec.workdir))
        work = os.path.realpath(self._host_dir / "work")
        host = os.path.realpath(os.path.join(work, rel))
        if rel.startswith("..") or not (host == work or host.startswith(work + os.sep)):
            raise SandboxFileError(
                f"{what} {path!r} is outside the workdir {self.spec.workdir} of this unisolated "
                "sandbox: use a path relative to the workdir (or install bubblewrap)")
        return host

    def _ctl_host(self) -> Path:
        if self._host_dir is None:
            raise SandboxError(f"sandbox {self.sandbox_id} is not started: use `async with`")
        return self._host_dir / "ctl"

    def _ctl_inside(self, name: str) -> str:
        if self.isolated:
            return posixpath.join(self._launch.ctl_mount, name)
        return str(self._ctl_host() / name)

    def _agent_log(self) -> str:
        try:
            text = (self._host_dir / "agent.log").read_text(errors="replace") if self._host_dir else ""
        except OSError:
            return ""
        return f"Agent log: {text.strip()[-2000:]}" if text.strip() else ""


def _write_user_files(host_dir: Path, uid: int) -> None:
    """The host's /etc/passwd and /etc/group plus user and group ``sandbox`` (``uid``)."""
    for name, line in (("passwd", f"sandbox:x:{uid}:{uid}:gymfleet sandbox:/root:/bin/bash\n"),
                       ("group", f"sandbox:x:{uid}:\n")):
        try:
            text = Path("/etc", name).read_text()
        except OSError:
            text = ""
        path = host_dir / name
        path.write_text(text + ("" if text.endswith("\n") or not text else "\n") + line)
        path.chmod(0o644)


async def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Closes the agent's stdin (it exits, taking the sandbox down); SIGKILL if it lingers."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    deadline = time.monotonic() + CLOSE_WAIT_S
    while proc.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    if proc.poll() is None:
        proc.kill()
        await asyncio.to_thread(proc.wait)
    if proc.stdout is not None:
        proc.stdout.close()


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)[:40] or "sandbox"
