"""The persistent shell: agent commands on any Sandbox, with cwd, exports and functions kept.

Each turn is one ``sandbox.exec``. A wrapper first sources a state file (the previous turn's
``export -p``, ``declare -f`` and ``cd``), evals the agent's script in that same bash, and on
exit writes the state back. This needs nothing from the backend beyond ``exec``, so it works on
every Sandbox. What does not survive a turn: unexported shell variables, aliases, shell options
(``set -e``), traps, and every change made by a command that timed out (it is killed before it
can save).
"""

from __future__ import annotations

import shlex
import uuid

from gymfleet.envs.sandbox.base import ExecResult, Sandbox

_WRAPPER = """\
__gf_state={state}
[ "${{__gf_state#/}}" = "$__gf_state" ] && __gf_state=$PWD/$__gf_state
if [ -f "$__gf_state" ]; then . "$__gf_state" >/dev/null 2>&1; else mkdir -p "${{__gf_state%/*}}" 2>/dev/null; fi
trap '__gf_rc=$?; {{ export -p; declare -f; printf "cd -- %q 2>/dev/null\\n" "$PWD"; }} \
> "$__gf_state.tmp" 2>/dev/null && mv -f "$__gf_state.tmp" "$__gf_state" 2>/dev/null; \
exit $__gf_rc' EXIT
eval {payload}
"""


def scratch_dir(sandbox: Sandbox) -> str:
    """Where the env keeps its own files in ``sandbox`` (shell state, setup script, tests).

    ``/tmp`` of an isolated sandbox is private to it and outside the task's files; the
    unisolated local fallback shares the host's ``/tmp`` and only accepts files under the
    workdir, so there it is a hidden folder of the workdir (removed with the sandbox).
    """
    return "/tmp/.gymfleet" if sandbox.isolated else ".gymfleet"


class PersistentShell:
    """Runs the agent's scripts in ``sandbox`` as if in one long-lived bash.

    Args:
        sandbox: a started sandbox.
        scratch_dir: a folder for the shell's state, outside the task's files where possible
            (absolute, or relative to ``spec.workdir``); see :func:`scratch_dir`.
        env: extra environment variables of every command.
    """

    def __init__(self, sandbox: Sandbox, scratch_dir: str, env: dict[str, str] | None = None) -> None:
        self.sandbox = sandbox
        self.env = dict(env or {})
        self.state_dir = f"{scratch_dir}/shell-{uuid.uuid4().hex}"

    def wrap(self, script: str) -> str:
        """The bash text that runs ``script`` between a state restore and a state save.

        The script is one single-quoted word for ``eval`` (exact for any text without NUL, which
        no command line can carry): no subshell and no ``base64`` process per command.
        """
        payload = script.replace("\0", "")
        return _WRAPPER.format(
            state=shlex.quote(f"{self.state_dir}/state.sh"),
            payload=shlex.quote(payload),
        )

    async def run(self, script: str, timeout_s: float) -> ExecResult:
        """Runs ``script`` (bash text) for at most ``timeout_s`` seconds.

        Raises:
            SandboxError: the backend failed (not the command: its failure is in the result).
        """
        return await self.sandbox.exec(self.wrap(script), timeout_s=timeout_s, env=self.env or None)
