"""Command-line agents in Docker sandboxes (Harness-v0): the real Codex CLI, opencode and Claude
Code from npm, each installed into the terminal task image and into a Harbor example's image. With
gold forced through the gateway each earns 1 (on the terminal task after its attempts to reach
anything but its own session failed), a no-op 0, every call token-exact; fake agents (bash scripts)
crash, hang and flood, each classified with the sandbox released."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gymfleet.envs.harness.cli_agents import AGENT_STATE, CLAUDE_CODE, CODEX, PROXY_PORT, CliAgent
from gymfleet.envs.harness.env import HarnessEnv
from gymfleet.envs.harness.harnesses import REPLY_FORMATS, gold_replies, noop_replies
from gymfleet.orchestrator.gateway import Gateway
from gymfleet.orchestrator.harness_rollout import HarnessRollout
from gymfleet.orchestrator.http.forcing import ScriptedRepliesEngine
from gymfleet.orchestrator.http.server import HttpGateway
from gymfleet.orchestrator.http.tree import SessionRegistry
from gymfleet.orchestrator.rollout import RolloutRequest
from tests.orchestrator.fake_engine import RecordingEngine

pytestmark = [pytest.mark.docker, pytest.mark.model, pytest.mark.timeout(600)]

TASK = "append-line-apple"


def make_env(tmp_path: Path, harness: str = "codex", **agent: Any) -> HarnessEnv:
    return HarnessEnv(harness=harness, task_env="gymfleet/TerminalEasy-v0", task_kwargs={"sandbox": "docker"},
                      grading_reserve_s=15, agent=agent, transcripts_dir=str(tmp_path / "transcripts"))


async def play(tokenizer: Any, env: HarnessEnv, replies: list[str],
               timeout_s: float = 180) -> tuple[HarnessRollout, RecordingEngine, SessionRegistry]:
    scripted = ScriptedRepliesEngine(tokenizer)
    engine = RecordingEngine(scripted)
    registry = SessionRegistry(Gateway(tokenizer, engine))
    request = RolloutRequest("run", "g", "g/0/0", "gymfleet/Harness-v0", TASK, rollout_timeout_s=timeout_s)
    scripted.script(request.rollout_id, replies)
    async with HttpGateway(registry) as server:
        rollout = HarnessRollout(request, lambda: env, registry, server)
        await rollout.run()
    return rollout, engine, registry


def assert_token_exact(tokenizer: Any, traj: Any, engine: RecordingEngine, replies: list[str]) -> None:
    """Every captured call continues the one before, and the trained tokens are what was sampled."""
    forced = [tokenizer.encode(r, add_special_tokens=False) + [tokenizer.eos_token_id] for r in replies]
    assert traj.metrics["calls"] == len(replies) == len(engine.prompts)
    assert traj.metrics["continued"] == len(replies) - 1
    for prompt, completion, later in zip(engine.prompts, forced, [*engine.prompts[1:], traj.token_ids.tolist()]):
        assert later[: len(prompt) + len(completion)] == prompt + completion
    assert traj.token_ids[traj.loss_mask == 1].tolist() == [t for c in forced for t in c]


@pytest.mark.parametrize("harness", ["codex", "opencode", "claude"])
async def test_on_the_terminal_task_gold_1_noop_0_token_exact_and_only_its_session(
        docker_available: bool, terminal_image: str, smollm_tokenizer: Any, tmp_path: Path, harness: str) -> None:
    gold = gold_replies(harness, make_env(tmp_path, harness).gold_policy(TASK).actions)  # type: ignore[attr-defined]
    scripted = ScriptedRepliesEngine(smollm_tokenizer)
    engine = RecordingEngine(scripted)
    registry = SessionRegistry(Gateway(smollm_tokenizer, engine))
    other = registry.open("another-rollout")
    async with HttpGateway(registry) as server:
        port = server.url.rsplit(":", 1)[1]
        escapes = [  # the policy, through the agent's own shell tool, tries every other way out
            f"curl -sS -m 5 -o /dev/null -w 'other=%{{http_code}}\\n' -X POST -d '{{}}' "
            f"http://127.0.0.1:{PROXY_PORT}/s/{other.token}/v1/messages",
            f"curl -sS -m 5 http://127.0.0.1:{port}/ 2>&1 | head -c 200; echo host-gateway-done",
            "curl -sS -m 5 http://1.1.1.1/ 2>&1 | head -c 200; echo internet-done",
        ]
        plays = (([REPLY_FORMATS[harness](c) for c in escapes] + gold, 1.0), (noop_replies(harness), 0.0))
        for i, (replies, reward) in enumerate(plays):
            env = make_env(tmp_path / str(i), harness)
            engine.prompts.clear()
            request = RolloutRequest("run", "g", f"g/0/{i}", "gymfleet/Harness-v0", TASK, rollout_timeout_s=240)
            scripted.script(request.rollout_id, list(replies))
            traj = await HarnessRollout(request, lambda: env, registry, server).run()
            assert (traj.status.value, traj.reason, traj.reward) == ("ok", "", reward), traj.reason
            assert traj.metrics["agent_exit_code"] == 0 and env.task._episode is None  # type: ignore[attr-defined]
            assert_token_exact(smollm_tokenizer, traj, engine, list(replies))
            if reward == 1.0:  # the agent's own transcript shows what its tool printed
                said = Path(traj.metrics["agent_transcript"]).read_text()
                assert traj.metrics["agent_refused"] == 1 and "other=404" in said  # another session's URL
                # the gateway's port on loopback is the sandbox's own loopback (nothing there); no route out
                assert f"Failed to connect to 127.0.0.1 port {port}" in said and "host-gateway-done" in said
                assert "Failed to connect to 1.1.1.1 port 80" in said and "internet-done" in said
                assert "echo apple >> notes.txt" in said
    assert other.counts["calls"] == 0  # the other session saw nothing


@pytest.mark.parametrize("harness", ["codex", "opencode", "claude"])
async def test_on_a_harbor_task_gold_1_noop_0(docker_available: bool, smollm_tokenizer: Any, tmp_path: Path,
                                              harness: str) -> None:
    def harbor() -> HarnessEnv:
        return HarnessEnv(harness=harness, task_env="gymfleet/Harbor-v0", grading_reserve_s=30,
                          task_kwargs={"sandbox": "docker", "task_ids": ["harbor-hello"]})

    gold = gold_replies(harness, harbor().gold_policy("harbor-hello").actions)  # type: ignore[attr-defined]
    for i, (replies, reward) in enumerate(((gold, 1.0), (noop_replies(harness), 0.0))):
        env = harbor()
        scripted = ScriptedRepliesEngine(smollm_tokenizer)
        engine = RecordingEngine(scripted)
        registry = SessionRegistry(Gateway(smollm_tokenizer, engine))
        request = RolloutRequest("run", "g", f"g/0/{i}", "gymfleet/Harness-v0", "harbor-hello", rollout_timeout_s=240)
        scripted.script(request.rollout_id, list(replies))
        async with HttpGateway(registry) as server:
            traj = await HarnessRollout(request, lambda: env, registry, server).run()
        assert (traj.status.value, traj.reason, traj.reward) == ("ok", "", reward), traj.reason
        assert traj.metrics["agent_exit_code"] == 0 and env.task._episode is None  # type: ignore[attr-defined]
        assert_token_exact(smollm_tokenizer, traj, engine, list(replies))


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


@pytest.mark.parametrize(("script", "agent", "timeout_s", "status", "reason"), [
    ("curl -sSf -X POST -d '{}' http://127.0.0.1:%d/s/forged-token/v1/chat/completions; exit 3" % PROXY_PORT,
     {}, 60, "infra_error", "the agent exited 3"),
    ("sleep 600", {}, 22, "truncated", "ran past its deadline"),
    ("yes flood | head -c 3000000", {"max_transcript_bytes": 1 << 20}, 60, "truncated", "flooded its output"),
], ids=["crash-calling-another-session", "hang", "flood"])
# the crash makes no model call, so it is the agent's failure (infra_error); one after a call is the
# policy's (test_a_crash_after_a_call_is_the_policys below)
async def test_a_bad_agent_is_classified_and_its_sandbox_released(
        docker_available: bool, terminal_image: str, smollm_tokenizer: Any, tmp_path: Path,
        script: str, agent: dict[str, Any], timeout_s: float, status: str, reason: str) -> None:
    env = fake_env(tmp_path, script, **agent)
    rollout, engine, _ = await play(smollm_tokenizer, env, [], timeout_s=timeout_s)
    traj = rollout.trajectories[-1]
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
