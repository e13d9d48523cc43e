"""The persistent shell: agent commands on any Sandbox, with cwd, exports and functions kept.

Each turn is one ``sandbox.exec``. A wrapper first sources a state file (the previous turn's
``export -p``, ``declare -f`` and ``cd``), evals the agent's script in that same bash, and on
exit writes the state back. This needs nothing from the backend beyond ``exec``, so it works on
every Sandbox. What does not survive a turn: unexported shell variables, aliases, shell options
(``set -e``), traps, and every change made by a command that timed out (it is killed before it
can save).
"""

from __future__ import annotations

import base64
import shlex
import uuid

from gymfleet.envs.sandbox.base import ExecResult, Sandbox

STATE_ROOT = "/tmp"
"""Where state folders go: outside the working directory, so that ``ls`` and ``git status``
in the task never see them."""

_WRAPPER = """\
__gf_state={state}
mkdir -p {state_dir} 2>/dev/null
if [ -f "$__gf_state" ]; then . "$__gf_state" >/dev/null 2>&1; fi
trap '__gf_rc=$?; {{ export -p; declare -f; printf "cd -- %q 2>/dev/null\\n" "$PWD"; }} \
> "$__gf_state.tmp" 2>/dev/null && mv -f "$__gf_state.tmp" "$__gf_state" 2>/dev/null; \
exit $__gf_rc' EXIT
eval "$(printf %s {payload} | base64 -d)"
"""


class PersistentShell:
    """Runs the agent's scripts in ``sandbox`` as if in one long-lived bash.

    Args:
        sandbox: a started sandbox.
        env: extra environment variables of every command.
    """

    def __init__(self, sandbox: Sandbox, env: dict[str, str] | None = None) -> None:
        self.sandbox = sandbox
        self.env = dict(env or {})
        self.state_dir = f"{STATE_ROOT}/gymfleet-shell-{uuid.uuid4().hex}"

    def wrap(self, script: str) -> str:
        """The bash text that runs ``script`` between a state restore and a state save."""
        payload = base64.b64encode(script.encode()).decode("ascii")
        return _WRAPPER.format(
            state=shlex.quote(f"{self.state_dir}/state.sh"),
            state_dir=shlex.quote(self.state_dir),
            payload=shlex.quote(payload),
        )

    async def run(self, script: str, timeout_s: float) -> ExecResult:
        """Runs ``script`` (bash text) for at most ``timeout_s`` seconds.

        Raises:
            SandboxError: the backend failed (not the command: its failure is in the result).
        """
        return await self.sandbox.exec(self.wrap(script), timeout_s=timeout_s, env=self.env or None)
