"""What the terminal agent reads: the system prompt, the first observation, command results."""

from __future__ import annotations

from gymfleet.envs.sandbox.base import ExecResult
from gymfleet.envs.terminal.task import Task

SYSTEM_PROMPT = """\
You are an expert Linux user working in a bash terminal to complete a task.

Each turn, reply with exactly one fenced code block tagged bash; it runs in a persistent shell:
```bash
cd project && ls -la
```
You may write a short thought before the block; one block per turn, never more.
- The working directory and exported environment variables (and shell functions) carry over
  between turns; plain unexported variables, aliases and `set` options do not.
- Each command has a time limit; a command past it is killed, and its changes to the working
  directory and variables are lost. Do not start interactive programs (editors, pagers, REPLs):
  write files with heredocs, `sed`, or `printf`, and pass `--no-pager`-style flags.
- To leave a server running, start it in the background with its output redirected, e.g.
  `nohup python3 server.py > server.log 2>&1 &`.
- You see the exit code, stdout and stderr of each command (long output is cut in the middle).
When the task is done, reply with the single word `submit` (or an empty ```submit``` block).
Hidden tests then check the state you left behind; you get no feedback from them before that.
"""

BRIEF_SYSTEM_PROMPT = """\
You work in a bash terminal. Reply with one fenced code block tagged bash that does the task:
```bash
ls -la
```
"""
"""The easy tier's prompt (``prompt: brief``): about 30 tokens instead of about 300, since on a
CPU the prompt is most of what a small model's rollout and training step cost."""

SYSTEM_PROMPTS = {"full": SYSTEM_PROMPT, "brief": BRIEF_SYSTEM_PROMPT}
"""The system prompts a :class:`~gymfleet.envs.terminal.env.TerminalEnvConfig` picks by name."""


def first_observation(task: Task, max_turns: int | None = None) -> str:
    """The task's instruction with the limits the agent works under: ``max_turns`` turns (None:
    the task's ``max_agent_turns``)."""
    cfg = task.config
    n = cfg.max_agent_turns if max_turns is None else max_turns
    return (
        f"Task: {task.task_id}\n\n{cfg.instruction.strip()}\n\n"
        f"(You have {n} turn{'' if n == 1 else 's'}; each command may run {cfg.timeout_s:g} s. "
        "You start in the task's working directory.)"
    )


def command_observation(result: ExecResult, turn: int, max_turns: int) -> str:
    """The agent's view of one command: exit code, stdout, stderr, timeout notice."""
    lines = [f"[turn {turn}/{max_turns}] exit code {result.exit_code} ({result.duration_s:.2f} s)"]
    if result.timed_out:
        lines.append(
            f"The command timed out after {result.duration_s:.0f} s and was killed; "
            "the working directory and variables are as they were before it."
        )
    lines.append(_stream("stdout", result.stdout, result.stdout_bytes))
    lines.append(_stream("stderr", result.stderr, result.stderr_bytes))
    return "\n".join(line for line in lines if line)


def _stream(name: str, text: str, n_bytes: int) -> str:
    if not text:
        return ""
    cut = f" (cut: {n_bytes} bytes in all)" if n_bytes > len(text.encode()) else ""
    return f"--- {name}{cut} ---\n{text.rstrip(chr(10))}"


def malformed_observation(reason: str, turn: int, max_turns: int) -> str:
    """Answer to a turn that broke the action format (it still counts as a turn)."""
    return f"[turn {turn}/{max_turns}] Nothing was run. {reason}"


def ending_observation(why: str, reward: float, n_passed: int, n_tests: int, error: str | None) -> str:
    """The last observation: why the episode ended and how the hidden tests went."""
    outcome = f"grading error: {error}" if error else f"{n_passed}/{n_tests} hidden tests passed"
    return f"{why} Reward {reward:g} ({outcome})."
