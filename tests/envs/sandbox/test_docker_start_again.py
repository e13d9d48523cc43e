"""A command Docker could not start once (runc's ``read init-p: connection reset by peer`` on a
loaded host) is started again instead of calling the sandbox damaged; twice is damage."""

from __future__ import annotations

from typing import Any

import pytest

from gymfleet.envs.errors import SandboxDamagedError
from gymfleet.envs.sandbox import docker_sandbox
from gymfleet.envs.sandbox.base import ExecResult, SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.docker_sandbox import DockerSandbox

RUNC_HICCUP = ("OCI runtime exec failed: exec failed: unable to start container process: read init-p: "
               "connection reset by peer: unknown")


class _Container:
    id = short_id = "c0ffee"


class FlakyStart(DockerSandbox):
    """Docker's start of the wrapper fails ``failures`` times, then the command runs."""

    def __init__(self, failures: int) -> None:
        super().__init__(None, SandboxSpec(image="gymfleet/base"), SandboxLabels(run_id="start-again"))  # type: ignore[arg-type]
        self.failures, self.starts = failures, 0

    async def _attempt(self, container: Any, cmd: str, timeout_s: float, workdir: Any, env: Any) -> ExecResult:
        self.starts += 1
        if self.starts <= self.failures:
            raise docker_sandbox._NoProcessError(RUNC_HICCUP)
        return ExecResult(exit_code=0, stdout="ran\n", stderr="", duration_s=0.0)


async def test_one_failed_start_is_started_again() -> None:
    sandbox = FlakyStart(failures=1)
    result = await sandbox._exec(_Container(), "true", 10.0, None, None)  # type: ignore[arg-type]
    assert (result.stdout, sandbox.starts) == ("ran\n", 2)


async def test_two_failed_starts_are_damage() -> None:
    sandbox = FlakyStart(failures=2)
    sandbox._container = _Container()  # type: ignore[assignment]
    with pytest.raises(SandboxDamagedError, match="read init-p"):
        await sandbox._exec(_Container(), "true", 10.0, None, None)  # type: ignore[arg-type]
    assert sandbox.starts == 2
