"""An in-memory sandbox and backend implementing the real Protocols, for the pool's tests."""

from __future__ import annotations

from typing import Self

from gymfleet.core.errors import SandboxError
from gymfleet.envs.errors import SandboxClosedError, SandboxFileError
from gymfleet.envs.sandbox.base import ExecResult, SandboxLabels, SandboxSpec


class FakeSandbox:
    """Files in a dict; understands ``true``, ``touch NAME``, ``ls``, ``daemon`` (a process
    that lives until reset) and the pool's generic reset script. ``broken`` makes exec fail."""

    def __init__(self, spec: SandboxSpec, labels: SandboxLabels) -> None:
        self.spec = spec
        self.labels = labels
        self.files: dict[str, bytes] = {}
        self.processes = 0
        self.started = False
        self.closed = False
        self.broken = False

    @property
    def isolated(self) -> bool:
        return True

    async def start(self) -> None:
        self.started = True

    async def exec(self, cmd: str, timeout_s: float = 60.0, workdir: str | None = None,
                   env: dict[str, str] | None = None) -> ExecResult:
        if self.closed:
            raise SandboxClosedError("closed")
        if self.broken:
            raise SandboxError("the fake sandbox is broken")
        if cmd.startswith("cd / ; rm -rf"):
            self.files.clear()
            self.processes = 0
        elif cmd.startswith("touch "):
            self.files[cmd.split()[1]] = b""
        elif cmd == "daemon":
            self.processes += 1
        elif cmd == "ls":
            return ExecResult(0, "".join(f"{name}\n" for name in sorted(self.files)), "", 0.0)
        elif cmd != "true":
            return ExecResult(127, "", f"fake: {cmd}: command not found\n", 0.0)
        return ExecResult(0, "", "", 0.0)

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.files[path] = data

    async def get_file(self, path: str) -> bytes:
        try:
            return self.files[path]
        except KeyError:
            raise SandboxFileError(f"no file {path}") from None

    async def stop_processes(self) -> list[str]:
        return []

    async def verifier(self, carry_changes: bool = False) -> Self:
        return self

    async def close(self) -> None:
        self.closed = True

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class FakeBackend:
    """Makes FakeSandboxes and remembers them all."""

    name = "fake"

    def __init__(self) -> None:
        self.made: list[FakeSandbox] = []
        self.gc_calls = 0

    def available(self) -> bool:
        return True

    def create(self, spec: SandboxSpec, labels: SandboxLabels | None = None) -> FakeSandbox:
        sandbox = FakeSandbox(spec, (labels or SandboxLabels()).with_expiry(spec.ttl_s))
        self.made.append(sandbox)
        return sandbox

    async def gc(self, *, run_id: str | None = None, expired_only: bool = True) -> int:
        self.gc_calls += 1
        if self.gc_calls == 1:
            raise OSError("the first sweep fails, as a flaky daemon would")
        return 0
