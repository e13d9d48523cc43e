"""The sandbox contract: where an agent's commands run, whatever the backend.

Every backend (``docker``, ``local``) implements :class:`Sandbox`; callers never
import a backend directly but go through :func:`gymfleet.envs.sandbox.open_sandbox`
or a :class:`~gymfleet.envs.sandbox.pool.SandboxPool`.

Paths: a relative path given to ``exec(workdir=...)``, ``put_file`` or ``get_file``
resolves against ``spec.workdir``; task authors should prefer relative paths so that a
task runs unchanged on every backend (the unisolated local fallback cannot map ``/app``).
"""

from __future__ import annotations

import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Protocol, Self, runtime_checkable

from pydantic import BaseModel, Field

from gymfleet.envs.sandbox.procs import my_identity

LABEL_PREFIX = "gymfleet"
LABEL_RUN_ID = f"{LABEL_PREFIX}.run_id"
LABEL_ROLLOUT_ID = f"{LABEL_PREFIX}.rollout_id"
LABEL_EXPIRES_AT = f"{LABEL_PREFIX}.expires_at"
LABEL_OWNER_PID = f"{LABEL_PREFIX}.owner_pid"
LABEL_OWNER_START = f"{LABEL_PREFIX}.owner_start"
LABEL_HOST = f"{LABEL_PREFIX}.host"


def owner_labels() -> dict[str, str]:
    """The labels naming this process as a sandbox's owner: pid, start time (so that a reaper
    tells a reused pid apart) and host."""
    pid, start_ticks = my_identity()
    return {LABEL_OWNER_PID: str(pid), LABEL_OWNER_START: str(start_ticks), LABEL_HOST: socket.gethostname()}


@dataclass(frozen=True)
class ExecResult:
    """What one command did.

    Attributes:
        exit_code: the command's exit status; -9 (or 137 in Docker) when killed on timeout.
        stdout: decoded standard output (UTF-8, invalid bytes replaced); when larger than the
            capture limit, the head and the tail joined by a marker naming the full size.
        stderr: the same for standard error.
        duration_s: wall time of the command, seconds.
        timed_out: True when the command hit ``timeout_s`` and its process tree was killed.
        stdout_bytes: full size of standard output in bytes, before truncation.
        stderr_bytes: full size of standard error in bytes, before truncation.
    """

    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    stdout_bytes: int = 0
    stderr_bytes: int = 0

    @property
    def ok(self) -> bool:
        """True when the command exited 0 and did not time out."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def truncated(self) -> bool:
        """True when either stream was cut to head and tail."""
        return self.stdout_bytes > len(self.stdout.encode()) or self.stderr_bytes > len(
            self.stderr.encode()
        )


class SandboxSpec(BaseModel):
    """What a sandbox must look like. One spec per task; pools are keyed by it."""

    image: str = "gymfleet/base:latest"
    """Container image (Docker backend). The local backend runs the host's own tools."""
    workdir: str = "/app"
    """Working directory inside the sandbox; created empty at start."""
    network: bool = False
    """Network access. Off unless the task asks for it."""
    net_admin: bool = False
    """CAP_NET_ADMIN inside the sandbox's own network namespace (Docker backend; the local
    backend ignores it): a grader routing an address into the loopback device. Without
    ``network`` that namespace holds only loopback, so the sandbox stays offline."""
    cpus: float = 1.0
    """CPU limit, in cores; 0: no limit (Docker: a CPU weight of 1024 per host core, so that a
    cgroup v1 ``cpu.shares`` reads as every core, as pylint's CPU count reads it)."""
    memory_mb: int = 1024
    """Memory limit, MiB."""
    pids_limit: int = 256
    """Most processes alive at once (fork bombs stop here)."""
    disk_mb: int = Field(default=512, ge=1)
    """Size of each writable space of the sandbox, MiB (default 512). The workdir and /tmp are
    each a size-limited filesystem (tmpfs charged to the sandbox's memory limit), so that a full
    disk is ``No space left on device`` inside the sandbox, never the host's. Docker: an image
    whose workdir already holds files (SWE images) keeps that workdir on the container's own
    layer, bounded only where the daemon's storage supports quotas (overlay2 on xfs with
    ``pquota``: then the whole writable layer gets this size instead). See docs/sandbox.md."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of every command."""
    ttl_s: float = 3600.0
    """Seconds after which the reaper may remove the sandbox."""
    max_output_bytes: int = 64 * 1024
    """Per stream, the bytes kept of a command's output (half head, half tail)."""

    def pool_key(self) -> str:
        """A key that two specs share when a warm sandbox of one serves the other."""
        return self.model_dump_json()


@dataclass(frozen=True)
class SandboxLabels:
    """Labels every sandbox carries, so that the reaper can find what nobody owns."""

    run_id: str = "adhoc"
    rollout_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    expires_at: float = 0.0
    """Unix time (seconds) after which the sandbox may be reaped; 0 means spec.ttl_s from start."""

    def with_expiry(self, ttl_s: float) -> SandboxLabels:
        """These labels, expiring ``ttl_s`` seconds from now unless an expiry is already set."""
        if self.expires_at:
            return self
        return SandboxLabels(self.run_id, self.rollout_id, time.time() + ttl_s)

    def as_dict(self) -> dict[str, str]:
        """The labels as strings, keyed ``gymfleet.*``."""
        return {
            LABEL_RUN_ID: self.run_id,
            LABEL_ROLLOUT_ID: self.rollout_id,
            LABEL_EXPIRES_AT: f"{self.expires_at:.0f}",
        }


@runtime_checkable
class Sandbox(Protocol):
    """An isolated place to run commands. Use it as an async context manager.

    ``async with backend.create(spec, labels) as sb: await sb.exec("ls")``
    """

    spec: SandboxSpec
    labels: SandboxLabels

    @property
    def isolated(self) -> bool:
        """False only for the plain-subprocess fallback, which can touch the host."""
        ...

    async def start(self) -> None:
        """Called once before first use (``__aenter__`` calls it).

        Raises:
            SandboxStartError: the sandbox could not be created.
            SandboxUnavailableError: the backend is missing.
        """
        ...

    async def exec(
        self,
        cmd: str,
        timeout_s: float = 60.0,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Runs ``cmd`` with ``bash -c`` and waits for it, at most ``timeout_s`` seconds.

        On timeout the command's whole process tree is killed, ``timed_out`` is set, and the
        sandbox stays usable. Background processes the command leaves behind do not block the
        call. Output is captured as bytes and decoded as UTF-8 with replacement.

        Raises:
            SandboxClosedError: after ``close()``.
            SandboxError: the backend failed (container gone, daemon down).
        """
        ...

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Writes ``data`` to ``path`` (parent folders created).

        Raises:
            SandboxFileError: the file could not be written.
        """
        ...

    async def get_file(self, path: str) -> bytes:
        """Reads the file at ``path``.

        Raises:
            SandboxFileError: no such file, or not a regular file.
        """
        ...

    async def stop_processes(self) -> list[str]:
        """Called once the agent is done, before a verifier runs (and again after its tests):
        kills every process in the sandbox, daemons included, and checks that none is left.

        Returns:
            The command lines of the processes that were alive, as the backend (not the
            sandbox's own tools) saw them: what a verifier may check instead of live processes.

        Raises:
            SandboxDamagedError: some process outlived the kill (the sandbox cannot be graded).
            SandboxError: the backend failed.
        """
        ...

    async def verifier(self, carry_changes: bool = False) -> Sandbox:
        """Called after :meth:`stop_processes`: where a verifier runs over the agent's work, with
        tools nothing the agent wrote can reach. This sandbox when that holds for it (Docker:
        nothing outside the workdir, /tmp and the output folder changed; local: the host's
        tools are bound read-only), else a fresh sandbox of the same spec holding a copy of the
        workdir, which the caller closes.

        Args:
            carry_changes: the verifier must also see the agent's changes outside the workdir
                (Harbor tasks install and configure system files), all but those that reach the
                verifier's own tools (interpreters, shells, the loader, start-up hooks, their
                configuration; the rules are ``docs/sandbox.md``'s): Docker then uses this sandbox
                when none of those changed, else a fresh one holding every other change.

        Raises:
            SandboxError: the backend failed.
        """
        ...

    async def close(self) -> None:
        """Kills everything in the sandbox and removes it. Idempotent."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...


@runtime_checkable
class SandboxBackend(Protocol):
    """Makes sandboxes of one kind and cleans up after them."""

    name: str

    def available(self) -> bool:
        """True when sandboxes can be made now (daemon answers, binary present)."""
        ...

    def create(self, spec: SandboxSpec, labels: SandboxLabels | None = None) -> Sandbox:
        """A new, not yet started sandbox."""
        ...

    async def gc(self, *, run_id: str | None = None, expired_only: bool = True) -> int:
        """Removes sandboxes left behind (expired, or whose owner process is gone).

        Args:
            run_id: only those of this run.
            expired_only: when False, remove every sandbox matching ``run_id`` (or all).

        Returns:
            How many sandboxes were removed.
        """
        ...
