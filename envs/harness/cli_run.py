"""One command-line agent episode in a task's Docker sandbox: settings and instruction placed, the
session's proxy opened inside the sandbox, the agent run to its exit or the deadline, its
transcript kept, and the episode classified (the task's grader runs after, in ``env.py``).

==============================================  ===========  ==================================
what the agent did                              status       reason
==============================================  ===========  ==================================
exited 0                                        ok
ran past the deadline (killed)                  truncated    ran past its deadline of N s
printed more than ``max_transcript_bytes``      truncated    flooded its output (cut at N bytes)
reached ``max_turns`` model calls               truncated    reached max_turns=N model calls
exited non-zero after a model call answered     ok           exited N: <its last stderr line>
exited non-zero before any model call           infra_error  exited N: <its last stderr line>
==============================================  ===========  ==================================

Each is graded by the task's grader all the same (its reward is recorded; ``infra_error`` rollouts
are not trained on). Once a model call has been answered, the policy's commands may have run in the
sandbox where the agent runs (``pkill codex`` is one), so a crash from then on is the policy's doing:
graded and trained on, never a dodged zero. Before any answer the policy has had no say, and the
crash is the agent's or the image's (nothing to train on either way).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymfleet.core.errors import SandboxError
from gymfleet.envs.harness.cli_agents import AGENT_STATE, PROXY_PORT, CliAgent, CliAgentConfig
from gymfleet.envs.harness.session_proxy import SessionProxy, container_pid, listen_in_netns
from gymfleet.envs.sandbox.base import ExecResult, Sandbox


@dataclass
class CliEpisode:
    """How the agent's process ended.

    Attributes:
        status: ``ok``, ``truncated`` or ``infra_error`` (see the module docstring).
        reason: one line, empty when ok.
        exit_code: the agent's exit status (137 when killed at the deadline).
        info: ``agent_exit_code``, ``agent_calls``, ``agent_refused``, ``agent_transcript``,
            ``agent_s``, ``agent_transcript_bytes``.
    """

    status: str
    reason: str
    exit_code: int
    info: dict[str, Any]


def session_root(base_url: str) -> str:
    """A session's root URL (``.../s/<token>``) from its base URL of any dialect."""
    return base_url.removesuffix("/").removesuffix("/v1")


async def run_cli_agent(sandbox: Sandbox, agent: CliAgent, config: CliAgentConfig, instruction: str,
                        base_url: str, timeout_s: float, transcript_path: Path | None) -> CliEpisode:
    """Runs ``agent`` in ``sandbox`` (a started Docker sandbox with the agent's image) on
    ``instruction``, against the gateway session of ``base_url``, for at most ``timeout_s`` seconds.

    Args:
        transcript_path: where the agent's stdout (its JSON events) is kept; None: not kept.

    Raises:
        SandboxError: the sandbox is not a running container, or the proxy could not be placed.
    """
    container_id = getattr(sandbox, "container_id", None)
    if not container_id:
        raise SandboxError("CLI agents run in Docker sandboxes: set task_kwargs.sandbox: docker")
    for name, text in agent.settings(config).items():
        await sandbox.put_file(f"{AGENT_STATE}/home/{name}", text.encode())
    await sandbox.put_file(f"{AGENT_STATE}/instruction.md", instruction.encode())
    pid = await asyncio.to_thread(container_pid, container_id)
    sock = await asyncio.to_thread(listen_in_netns, pid, PROXY_PORT)
    started = time.monotonic()
    async with SessionProxy(sock, session_root(base_url), config.max_turns) as proxy:
        result = await sandbox.exec(agent.launch(config), timeout_s=max(1.0, timeout_s))
    transcript = await _transcript(sandbox)
    info: dict[str, Any] = {"agent_exit_code": result.exit_code, "agent_calls": proxy.calls,
                            "agent_refused": len(proxy.refused), "agent_s": round(time.monotonic() - started, 3),
                            "agent_transcript_bytes": len(transcript)}
    if transcript_path is not None:
        transcript_path.parent.mkdir(parents=True, exist_ok=True)
        transcript_path.write_bytes(transcript)
        info["agent_transcript"] = str(transcript_path)
    status, reason = classify(result, len(transcript), config, proxy)
    return CliEpisode(status, reason, result.exit_code, info)


def classify(result: ExecResult, transcript_bytes: int, config: CliAgentConfig,
             proxy: SessionProxy) -> tuple[str, str]:
    """The status and reason of an agent's run (the module docstring's table, in its order)."""
    if result.timed_out:
        return "truncated", f"the agent ran past its deadline of {result.duration_s:.0f} s"
    if transcript_bytes >= config.max_transcript_bytes:
        return "truncated", f"the agent flooded its output (cut at {config.max_transcript_bytes} bytes)"
    if any(": 429 (max_turns" in line for line in proxy.refused):
        return "truncated", f"the agent reached max_turns={config.max_turns} model calls"
    if result.exit_code != 0:
        last = (result.stderr.strip().splitlines() or [""])[-1][:200]
        refused = f"; refused calls: {'; '.join(proxy.refused[:3])}" if proxy.refused else ""
        status = "ok" if proxy.answered > 0 else "infra_error"
        return status, f"the agent exited {result.exit_code}: {last}{refused}"
    return "ok", ""


async def _transcript(sandbox: Sandbox) -> bytes:
    try:
        return await sandbox.get_file(f"{AGENT_STATE}/transcript.jsonl")
    except SandboxError:  # the agent (or the policy through it) removed it
        return b""
