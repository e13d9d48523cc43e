"""Errors raised by gymfleet.envs.

Class tree (under :class:`gymfleet.core.errors.GymfleetError`; the whole tree is drawn in
``gymfleet/core/errors.py``)::

    EnvError                          (gymfleet.core.errors; the env boundary's root)
    ├── SandboxError                  a sandbox could not be used (infrastructure)
    │   ├── SandboxUnavailableError   the backend is missing (no daemon, no bubblewrap)
    │   ├── SandboxStartError         a sandbox did not start (image missing, limits refused)
    │   ├── SandboxClosedError        the sandbox was used after close()
    │   ├── SandboxFileError          put_file / get_file failed (path missing, not a file)
    │   └── SandboxLostError          removed, stopped or restarted from outside mid-command
    ├── SandboxDamagedError           the policy broke its own sandbox (NOT infrastructure)
    ├── ImageBuildError               `gymfleet images build` failed
    │   └── AgentInstallError         a CLI agent could not be installed into a task image
    ├── UnknownEnvError               an env id that is not registered (lists the known ids)
    ├── EnvCheckError                 an env breaks the contract (`check_env`; says what to fix)
    └── TaskError                     a task folder or instance is malformed

A malformed *action* is never an exception: the env answers it with an observation.

Damage inside the sandbox is the policy's, damage from outside is infrastructure (see
``docs/sandbox.md``): ``SandboxDamagedError`` (the agent's own commands left the sandbox
unable to run commands, or filled its disk) ends the episode as the policy's failure and is
graded; every ``SandboxError`` is an infrastructure failure, retried and never trained on.
"""

from __future__ import annotations

from gymfleet.core.errors import EnvError, SandboxError

__all__ = [
    "AgentInstallError", "EnvCheckError", "ImageBuildError", "SandboxClosedError", "SandboxDamagedError",
    "SandboxFileError", "SandboxLostError", "SandboxStartError", "SandboxUnavailableError",
    "TaskError", "UnknownEnvError",
]


class SandboxUnavailableError(SandboxError):
    """The sandbox backend is missing (no Docker daemon answering, no bubblewrap)."""


class SandboxStartError(SandboxError):
    """A sandbox did not start (image missing, resource limits refused)."""


class SandboxClosedError(SandboxError):
    """The sandbox was used after ``close()``."""


class SandboxFileError(SandboxError):
    """A file could not be copied into or out of the sandbox."""


class SandboxLostError(SandboxError):
    """The sandbox went away from outside while in use: its container was removed, stopped or
    restarted (an operator, the reaper, the daemon, the host's OOM killer). The command that was
    running is reported lost, never run again behind the caller's back."""


class SandboxDamagedError(EnvError):
    """The commands run in the sandbox broke it: it can no longer start a command (``rm -rf /``
    removed bash) or its writable space is full for the env's own files. The policy's failure,
    not infrastructure: the episode ends and is graded on what is left (normally 0)."""


class ImageBuildError(EnvError):
    """An image under ``images/`` failed to build."""


class AgentInstallError(ImageBuildError):
    """A command-line agent could not be installed into a task image (npm, the binary, its
    architecture, the build); the message is one line naming the fix."""


class UnknownEnvError(EnvError, KeyError):
    """An env id that is not registered; the message lists the known ids."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class EnvCheckError(EnvError, AssertionError):
    """An env breaks the env contract (raised by ``check_env``); the message names the env, the
    instance, the rule and the fix. Also an AssertionError, as Gymnasium's checker raises."""


class TaskError(EnvError):
    """A task folder or task instance is malformed (missing file, bad YAML)."""
