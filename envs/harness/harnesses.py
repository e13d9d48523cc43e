"""The harnesses Harness-v0 runs, by name: each a function run in a worker thread.

A harness function takes ``(task, base_url, bridge)``: the task's instruction, the base URL of
its gateway session (OpenAI-compatible; ``.../s/<token>/v1``) and the :class:`SandboxBridge` its
commands go through; it returns its own exit status (a word) and raises on a crash.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from gymfleet.envs.actions import Command, parse_fenced_action
from gymfleet.envs.harness.bridge import SandboxBridge
from gymfleet.envs.harness.mini_swe_agent import SUBMIT_COMMAND, run_mini_swe_agent
from gymfleet.envs.harness.smolagents_agent import run_smolagents

HarnessFn = Callable[[str, str, SandboxBridge], str]

MINI_SWE_AGENT_CONFIGS: dict[str, str] = {"mini-swe-agent": "mini.yaml", "mini-swe-agent-text": "mini_textbased.yaml"}
"""The mini-swe-agent harnesses and the builtin config each starts from."""

HARNESSES: dict[str, HarnessFn] = {
    **{name: functools.partial(run_mini_swe_agent, config_name=config) for name, config in MINI_SWE_AGENT_CONFIGS.items()},
    "smolagents": run_smolagents,
}
"""mini-swe-agent 2.x with its default tool-calling config and with its text-based one; smolagents'
ToolCallingAgent."""


def configured_harness(name: str, overrides: dict[str, Any]) -> HarnessFn:
    """The harness ``name`` with a run's mini-swe-agent config (read by
    :func:`~gymfleet.envs.harness.mini_swe_agent.config_overrides`) merged over its own.

    Raises:
        ValueError: ``name`` is not a mini-swe-agent harness (only those take a config).
    """
    if name not in MINI_SWE_AGENT_CONFIGS:
        raise ValueError(f"harness_config is for {sorted(MINI_SWE_AGENT_CONFIGS)}; {name} takes none")
    return functools.partial(run_mini_swe_agent, config_name=MINI_SWE_AGENT_CONFIGS[name], overrides=overrides)


def tool_call_reply(command: str) -> str:
    """A completion calling the ``bash`` tool with ``command`` (the gateway's tool-call format)."""
    return "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "</tool_call>"


def text_reply(command: str) -> str:
    """A completion in mini-swe-agent's text-based format (one ``mswea_bash_command`` block)."""
    return f"THOUGHT: run it.\n\n```mswea_bash_command\n{command}\n```"


def exec_command_reply(command: str) -> str:
    """A completion calling Codex's ``exec_command`` tool (its shell tool, argument ``cmd``)."""
    return "<tool_call>" + json.dumps({"name": "exec_command", "arguments": {"cmd": command}}) + "</tool_call>"


def bash_tool_reply(command: str) -> str:
    """A completion calling opencode's ``bash`` tool (arguments ``command`` and ``description``)."""
    return "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": command,
                                                                     "description": "Run the command"}}) + "</tool_call>"


def claude_bash_reply(command: str) -> str:
    """A completion calling Claude Code's ``Bash`` tool (arguments ``command`` and ``description``)."""
    return "<tool_call>" + json.dumps({"name": "Bash", "arguments": {"command": command,
                                                                     "description": "Run the command"}}) + "</tool_call>"


REPLY_FORMATS: dict[str, Callable[[str], str]] = {
    "mini-swe-agent": tool_call_reply, "mini-swe-agent-text": text_reply, "smolagents": tool_call_reply,
    "codex": exec_command_reply, "opencode": bash_tool_reply, "claude": claude_bash_reply}
"""How each harness's model writes one command (what a forced gold or no-op reply looks like)."""


def gold_replies(harness: str, gold_actions: list[str]) -> list[str]:
    """The completions that play a task's gold actions through ``harness``: each fenced bash
    block as one command, then the harness's submit command.

    Raises:
        KeyError: unknown harness.
    """
    reply = REPLY_FORMATS[harness]
    commands = []
    for action in gold_actions:
        parsed = parse_fenced_action(action, {"submit"}, "")
        if isinstance(parsed, Command):
            commands.append(parsed.script)
    return [reply(c) for c in commands] + [submit_reply(harness)]


def noop_replies(harness: str) -> list[str]:
    """The completions of a policy that does nothing: submit at once."""
    return [submit_reply(harness)]


def submit_reply(harness: str) -> str:
    """The completion with which ``harness``'s model says it is done."""
    if harness in ("codex", "opencode", "claude"):  # a reply without a tool call ends the turn; the CLI exits
        return "Done."
    if harness == "smolagents":  # its final_answer tool
        return "<tool_call>" + json.dumps({"name": "final_answer", "arguments": {"answer": "done"}}) + "</tool_call>"
    return REPLY_FORMATS[harness](SUBMIT_COMMAND)
