"""The task's sandbox as a harness thread sees it: one blocking ``execute(command)`` per command.

A Python harness runs its loop in a worker thread; its environment interface (e.g.
mini-swe-agent's ``execute``) calls :meth:`SandboxBridge.execute`, which runs the command as one
step of the task env (a fenced bash block) on the orchestrator's event loop and waits for it, so
the task's own sandbox, limits and grading apply unchanged. After :meth:`close` (the rollout's
deadline, or its end) every call raises :class:`HarnessStopped`, which ends the harness's loop.
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from gymfleet.envs.base import AgentEnv

_EXIT = re.compile(r"exit code (-?\d+)")


class HarnessStopped(RuntimeError):
    """The rollout ended (deadline or close): the harness's command was not run."""


@dataclass
class CommandResult:
    """What one command gave: the task env's observation, the exit code parsed from it (0 if it
    gives none), and whether the task env ended the episode on it."""

    output: str
    exit_code: int
    ended: bool


@dataclass
class SandboxBridge:
    """Runs a harness thread's commands as steps of ``env`` on ``loop``.

    Args:
        env: the task env, reset (its sandbox leased) by the rollout.
        loop: the event loop the env lives on.
        command_timeout_s: the longest one command may block the harness thread, seconds.
    """

    env: AgentEnv
    loop: asyncio.AbstractEventLoop
    command_timeout_s: float = 600.0
    n_commands: int = 0
    ended: bool = False
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    submitted: bool = False
    in_command: bool = False
    """True while a command runs in the sandbox (a deadline then is the policy's doing)."""
    _closed: threading.Event = field(default_factory=threading.Event)

    def execute(self, command: str) -> CommandResult:
        """Runs ``command`` in the task's sandbox (called from the harness thread).

        Raises:
            HarnessStopped: the rollout ended, or the task env already ended the episode.
        """
        if self._closed.is_set() or self.ended:
            raise HarnessStopped("the rollout ended: no more commands run")
        self.in_command = True
        try:
            future = asyncio.run_coroutine_threadsafe(self.env.step_async(f"```bash\n{command}\n```"), self.loop)
            obs, reward, terminated, truncated, info = future.result(self.command_timeout_s)
        finally:
            self.in_command = False
        self.n_commands += 1
        self.reward += float(reward)
        self.info = dict(info)
        self.ended = bool(terminated or truncated)
        match = _EXIT.search(obs)
        return CommandResult(obs, int(match.group(1)) if match else 0, self.ended)

    def submit(self) -> None:
        """The harness says it is done (called from its thread): the rollout grades next."""
        self.submitted = True

    def close(self) -> None:
        """Refuses every later command (called on the loop when the rollout ends)."""
        self._closed.set()
