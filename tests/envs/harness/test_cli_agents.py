"""Command-line agents in Docker sandboxes (Harness-v0): the real Codex CLI, opencode and Claude
Code from npm, each installed into the terminal task image and into a Harbor example's image. With
gold forced through the gateway each earns 1 (on the terminal task after its attempts to reach
anything but its own session failed), a no-op 0, every call token-exact; fake agents (bash scripts)
crash, hang and flood, each classified with the sandbox released."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gymfleet.core.records import Trajectory
from gymfleet.envs.harness.cli_agents import AGENT_STATE, CLAUDE_CODE, CODEX, PROXY_PORT, CliAgent
from gymfleet.envs.harness.env import HarnessEnv
from gymfleet.envs.harness.harnesses import REPLY_FORMATS, gold_replies, noop_replies
from gymfleet.orchestrator.gateway import Gateway
from gymfleet.orchestrator.harness_rollout import HarnessRollout
from gymfleet.orchestrator.http.forcing import ScriptedRepliesEngine
from gymfleet.orchestrator.http.server import HttpGateway
from gymfleet.orchestrator.http.tree import HarnessSession, SessionRegistry
from gymfleet.orchestrator.rollout import RolloutRequest
from tests.orchestrator.fake_engine import RecordingEngine

pytestmark = [pytest.mark.docker, pytest.mark.model, pytest.mark.timeout(600)]

TASK = "append-line-apple"


def make_env(tmp_path: Path, harness: str = "codex", **agent: Any) -> HarnessEnv:
    return HarnessEnv(harness=harness, task_env="gymfleet/TerminalEasy-v0", task_kwargs={"sandbox": "docker"},
                      grading_reserve_s=15, agent=agent, transcripts_dir=str(tmp_path / "transcripts"))


Replies = Callable[[str, str], list[str]]
"""``(another session's token, the host gateway's port) -> the completions to force``."""


async def play(tokenizer: Any, env: HarnessEnv, replies: Replies, instance: str = TASK, timeout_s: float = 180,
               ) -> tuple[Trajectory, RecordingEngine, list[str], str, HarnessSession]:
    """One rollout of ``env`` with ``replies`` forced, behind its own gateway beside another
    session; returns the trajectory, the engine (its prompts), the replies, the gateway's port and
    the other session."""
    scripted = ScriptedRepliesEngine(tokenizer)
    engine = RecordingEngine(scripted)
    registry = SessionRegistry(Gateway(tokenizer, engine))
    other = registry.open("another-rollout")
    request = RolloutRequest("run", "g", "g/0/0", "gymfleet/Harness-v0", instance, rollout_timeout_s=timeout_s)
    async with HttpGateway(registry) as server:
        port = server.url.rsplit(":", 1)[1]
        forced = replies(other.token, port)
        scripted.script(request.rollout_id, forced)
        traj = await HarnessRollout(request, lambda: env, registry, server).run()
    return traj, engine, forced, port, other


def assert_token_exact(tokenizer: Any, traj: Any, engine: RecordingEngine, replies: list[str]) -> None:
    """Every captured call continues the one before, and the trained tokens are what was sampled."""
    forced = [tokenizer.encode(r, add_special_tokens=False) + [tokenizer.eos_token_id] for r in replies]
    assert traj.metrics["calls"] == len(replies) == len(engine.prompts)
    assert traj.metrics["continued"] == len(replies) - 1
    for prompt, completion, later in zip(engine.prompts, forced, [*engine.prompts[1:], traj.token_ids.tolist()]):
        assert later[: len(prompt) + len(completion)] == prompt + completion
    assert traj.token_ids[traj.loss_mask == 1].tolist() == [t for c in forced for t in c]


def escapes(other_token: str, port: str) -> list[str]:
    """The policy, through the agent's own shell tool, tries every other way out."""
    return [f"curl -sS -m 5 -o /dev/null -w 'other=%{{http_code}}\\n' -X POST -d '{{}}' "
            f"http://127.0.0.1:{PROXY_PORT}/s/{other_token}/v1/messages",
            f"curl -sS -m 5 http://127.0.0.1:{port}/ 2>&1 | head -c 200; echo host-gateway-done",
            "curl -sS -m 5 http://1.1.1.1/ 2>&1 | head -c 200; echo internet-done"]


@pytest.mark.parametrize("harness", ["codex", "opencode", "claude"])
async def test_on_the_terminal_task_gold_1_noop_0_token_exact_and_only_its_session(
        docker_available: bool, terminal_image: str, smollm_tokenizer: Any, tmp_path: Path, harness: str) -> None:
    gold = gold_replies(harness, make_env(tmp_path, harness).gold_policy(TASK).actions)  # type: ignore[attr-defined]
    reply = REPLY_FORMATS[harness]
    envs = [make_env(tmp_path / "gold", harness), make_env(tmp_path / "noop", harness)]
    # gold (after the escapes) and no-op side by side: two sandboxes of one image build
    played = await asyncio.gather(
        play(smollm_tokenizer, envs[0], lambda token, port: [reply(c) for c in escapes(token, port)] + gold),
        play(smollm_tokenizer, envs[1], lambda token, port: noop_replies(harness)))
    for (traj, engine, replies, port, other), reward, env in zip(played, (1.0, 0.0), envs):
        assert (traj.status.value, traj.reason, traj.reward) == ("ok", "", reward), traj.reason
        assert traj.metrics["agent_exit_code"] == 0 and env.task._episode is None  # type: ignore[attr-defined]
        assert_token_exact(smollm_tokenizer, traj, engine, replies)
        assert other.counts["calls"] == 0  # the other session saw nothing
    traj, _, _, port, _ = played[0]
    said = Path(traj.metrics["agent_transcript"]).read_text()  # what the agent's own tool printed
    assert traj.metrics["agent_refused"] == 1 and "other=404" in said  # another session's URL
    # the gateway's port on loopback is the sandbox's own loopback (nothing there); no route out
    assert f"Failed to connect to 127.0.0.1 port {port}" in said and "host-gateway-done" in said
    assert "Failed to connect to 1.1.1.1 port 80" in said and "internet-done" in said
    assert "echo apple >> notes.txt" in said


@pytest.mark.parametrize("harness", ["codex", "opencode", "claude"])
async def test_on_a_harbor_task_gold_1_noop_0(docker_available: bool, smollm_tokenizer: Any, tmp_path: Path,
                                              harness: str) -> None:
    def harbor() -> HarnessEnv:
        return HarnessEnv(harness=harness, task_env="gymfleet/Harbor-v0", grading_reserve_s=30,
                          task_kwargs={"sandbox": "docker", "task_ids": ["harbor-hello"]})

    gold = gold_replies(harness, harbor().gold_policy("harbor-hello").actions)  # type: ignore[attr-defined]
    envs = [harbor(), harbor()]
    played = await asyncio.gather(*(play(smollm_tokenizer, env, lambda token, port, r=r: r, "harbor-hello", 240)
                                    for env, r in zip(envs, (gold, noop_replies(harness)))))
    for (traj, engine, replies, _, _), reward, env in zip(played, (1.0, 0.0), envs):
        assert (traj.status.value, traj.reason, traj.reward) == ("ok", "", reward), traj.reason
        assert traj.metrics["agent_exit_code"] == 0 and env.task._episode is None  # type: ignore[attr-defined]
        assert_token_exact(smollm_tokenizer, traj, engine, replies)


def fake_agent(script: str) -> CliAgent:
    """A CLI agent that is a bash script (its settings file), for the failure cases."""
    return CliAgent(name="fake", package="", version="0", platforms={}, binary="", triples={},
                    dialect="openai-chat", default_permission_mode="", settings=lambda config: {"agent.sh": script},
                    command=lambda config, binary: ["bash", f"{AGENT_STATE}/home/agent.sh"], home_env="FAKE_HOME")


def fake_env(tmp_path: Path, script: str, **agent: Any) -> HarnessEnv:
    env = make_env(tmp_path, **agent)
    env.cli_agent = fake_agent(script)
    env.task.spec_hook = None  # type: ignore[attr-defined]  # the terminal image as is: bash is the agent
    return env


BAD_AGENTS = [  # (script, agent settings, rollout deadline s, status, reason)
    ("curl -sSf -X POST -d '{}' http://127.0.0.1:%d/s/forged-token/v1/chat/completions; exit 3" % PROXY_PORT,
     {}, 60, "infra_error", "the agent exited 3"),
    ("sleep 600", {}, 22, "truncated", "ran past its deadline"),
    ("yes flood | head -c 3000000", {"max_transcript_bytes": 1 << 20}, 60, "truncated", "flooded its output"),
]
"""A crash calling another session's URL, a hang, a flood. The crash makes no model call, so it is
the agent's failure (infra_error); one after a call is the policy's (test_cli_run.py)."""


async def test_a_bad_agent_is_classified_and_its_sandbox_released(
        docker_available: bool, terminal_image: str, smollm_tokenizer: Any, tmp_path: Path) -> None:
    envs = [fake_env(tmp_path / str(i), script, **agent) for i, (script, agent, *_) in enumerate(BAD_AGENTS)]
    played = await asyncio.gather(*(play(smollm_tokenizer, env, lambda token, port: [], timeout_s=timeout_s)
                                    for env, (_, _, timeout_s, _, _) in zip(envs, BAD_AGENTS)))  # side by side
    for (traj, engine, *_), env, (_, _, _, status, reason) in zip(played, envs, BAD_AGENTS):
        assert traj.status.value == status and reason in traj.reason, traj.reason
        assert traj.reward == 0.0 and engine.prompts == []  # graded by the task's grader; no model call made
        assert env.task._episode is None  # type: ignore[attr-defined]
        if status == "infra_error":
            assert "404" in traj.reason and traj.metrics["agent_refused"] == 1
        if "flood" in reason:
            assert Path(traj.metrics["agent_transcript"]).stat().st_size == 1 << 20


def test_codex_is_pinned_and_speaks_responses() -> None:
    assert (CODEX.version, CODEX.dialect) == ("0.171.0", "openai-responses")
    assert CODEX.npm_spec("x86_64") == "@openai/codex@0.171.0-linux-x64"


def test_claude_code_is_pinned_and_speaks_messages() -> None:
    assert (CLAUDE_CODE.version, CLAUDE_CODE.dialect) == ("2.1.332", "anthropic-messages")
    assert CLAUDE_CODE.npm_spec("x86_64") == "@anthropic-ai/claude-code-linux-x64@2.1.332"
