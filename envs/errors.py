"""Errors raised by gymfleet.envs.

Class tree (under :class:`gymfleet.core.errors.GymfleetError`; the whole tree is drawn in
``gymfleet/core/errors.py``)::

    GymfleetEnvError                  = gymfleet.core.errors.EnvError
    ├── SandboxError                  a sandbox could not be used (infrastructure)
    │   ├── SandboxUnavailableError   the backend is missing (no daemon, no bubblewrap)
    │   ├── SandboxStartError         a sandbox did not start (image missing, limits refused)
    │   ├── SandboxClosedError        the sandbox was used after close()
    │   └── SandboxFileError          put_file / get_file failed (path missing, not a file)
    ├── ImageBuildError               `gymfleet images build` failed
    ├── UnknownEnvError               an env id that is not registered (lists the known ids)
    ├── EnvCheckError                 an env breaks the contract (`check_env`; says what to fix)
    └── TaskError                     a task folder or instance is malformed

A malformed *action* is never an exception: the env answers it with an observation.
"""

from __future__ import annotations

from gymfleet.core.errors import EnvError, SandboxError

GymfleetEnvError = EnvError
"""Base class of every error raised by gymfleet.envs (the env boundary's root)."""

__all__ = [
    "GymfleetEnvError", "ImageBuildError", "SandboxClosedError", "SandboxError", "SandboxFileError",
    "SandboxStartError", "SandboxUnavailableError", "TaskError", "UnknownEnvError", "EnvCheckError",
]


class SandboxUnavailableError(SandboxError):
    """The sandbox backend is missing (no Docker daemon answering, no bubblewrap)."""


class SandboxStartError(SandboxError):
    """A sandbox did not start (image missing, resource limits refused)."""


class SandboxClosedError(SandboxError):
    """The sandbox was used after ``close()``."""


class SandboxFileError(SandboxError):
    """A file could not be copied into or out of the sandbox."""


class ImageBuildError(GymfleetEnvError):
    """An image under ``images/`` failed to build."""


class UnknownEnvError(GymfleetEnvError, KeyError):
    """An env id that is not registered; the message lists the known ids."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class EnvCheckError(GymfleetEnvError, AssertionError):
    """An env breaks the env contract (raised by ``check_env``); the message names the env, the
    instance, the rule and the fix. Also an AssertionError, as Gymnasium's checker raises."""


class TaskError(GymfleetEnvError):
    """A task folder or task instance is malformed (missing file, bad YAML)."""
