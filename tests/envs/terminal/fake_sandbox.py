"""A Sandbox for tests only: bash subprocesses in a temp dir, no isolation at all.

It implements the real Sandbox and SandboxBackend Protocols so that the terminal env's logic
can be tested without Docker or bubblewrap. Never a shipped backend.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Self

from gymfleet.envs.errors import SandboxClosedError, SandboxFileError
from gymfleet.envs.sandbox.base import ExecResult, SandboxLabels, SandboxSpec


class FakeSandbox:
    """Runs ``bash -c`` in a temp dir standing in for ``spec.workdir``."""

    def __init__(self, spec: SandboxSpec, labels: SandboxLabels | None = None) -> None:
        self.spec = spec
        self.labels = labels or SandboxLabels()
        self.root: Path | None = None
        self.closed = False
        self.pgids: list[int] = []
        self.n_exec = 0
        self.n_stops = 0

    @property
    def isolated(self) -> bool:
        return False

    async def start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="gymfleet-fake-"))

    def _path(self, path: str) -> Path:
        if self.closed or self.root is None:
            raise SandboxClosedError("fake sandbox is closed")
        if path == self.spec.workdir or path.startswith(self.spec.workdir + "/"):
            path = path[len(self.spec.workdir) :].lstrip("/")
        return self.root / path if not path.startswith("/") else Path(path)

    async def exec(
        self, cmd: str, timeout_s: float = 60.0, workdir: str | None = None, env: dict[str, str] | None = None
    ) -> ExecResult:
        cwd = self._path(workdir or self.spec.workdir)
        self.n_exec += 1
        full_env = {"PATH": os.environ["PATH"], "HOME": str(self.root), **self.spec.env, **(env or {})}
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                "bash", "-c", cmd, cwd=cwd, env=full_env, stdin=asyncio.subprocess.DEVNULL,
                stdout=out, stderr=err, start_new_session=True,
            )
            self.pgids.append(proc.pid)
            timed_out = False
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except TimeoutError:
                timed_out = True
                _killpg(proc.pid)
                await proc.wait()
            duration_s = time.monotonic() - start
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        code = -9 if timed_out else proc.returncode or 0
        return ExecResult(code, self._cut(stdout), self._cut(stderr), duration_s, timed_out, len(stdout), len(stderr))

    def _cut(self, data: bytes) -> str:
        limit = self.spec.max_output_bytes
        if len(data) > limit:
            data = data[: limit // 2] + b"\n[... cut ...]\n" + data[-limit // 2 :]
        return data.decode("utf-8", "replace")

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode)

    async def get_file(self, path: str) -> bytes:
        target = self._path(path)
        if not target.is_file():
            raise SandboxFileError(f"no file {path}")
        return target.read_bytes()

    async def stop_processes(self) -> list[str]:
        """Kills the process groups of its commands (what setsid escaped lives on: a fake)."""
        for pgid in self.pgids:
            _killpg(pgid)
        self.n_stops += 1
        return []

    async def verifier(self, carry_changes: bool = False) -> Self:
        return self

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for pgid in self.pgids:
            _killpg(pgid)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class FakeBackend:
    """Makes :class:`FakeSandbox` es and remembers them, so tests can check they were closed."""

    name = "fake"

    def __init__(self) -> None:
        self.created: list[FakeSandbox] = []

    def available(self) -> bool:
        return True

    def create(self, spec: SandboxSpec, labels: SandboxLabels | None = None) -> FakeSandbox:
        sandbox = FakeSandbox(spec, labels)
        self.created.append(sandbox)
        return sandbox

    async def gc(self, *, run_id: str | None = None, expired_only: bool = True) -> int:
        return 0
