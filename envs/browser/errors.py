"""Errors raised by gymfleet.envs.browser.

Class tree::

    EnvError                      (gymfleet.envs.errors)
    ├── SandboxError
    │   └── BrowserStartError             Chromium did not start or could not be reached (infrastructure)
    ├── TaskError
    │   ├── BrowserTaskError              a task page did not load or set up (missing file, no core.js)
    │   └── NoGoldPolicyError             the task has no scripted gold policy (also NotImplementedError)
    └── BrowserActionError
        ├── ActionParseError              action text that is not one call of the grammar
        └── ActionError                   a well-formed action that could not be performed

Action errors never leave the env: it answers them with an observation that says what was wrong.
"""

from __future__ import annotations

from gymfleet.core.errors import EnvError, SandboxError
from gymfleet.envs.errors import TaskError


class BrowserStartError(SandboxError):
    """Chromium did not start (local process or container) or its DevTools endpoint did not answer."""


class BrowserTaskError(TaskError):
    """A task page did not load or did not set up (missing HTML file, no MiniWoB core)."""


class NoGoldPolicyError(TaskError, NotImplementedError):
    """The current task has no scripted gold policy."""


class BrowserActionError(EnvError):
    """An action the env could not carry out; turned into an observation, never raised to callers."""


class ActionParseError(BrowserActionError):
    """The action text is not exactly one call of the action grammar."""


class ActionError(BrowserActionError):
    """A well-formed action failed: unknown element id, hidden element, not a field, bad key."""
