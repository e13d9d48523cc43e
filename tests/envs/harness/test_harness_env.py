"""`gymfleet/Harness-v0` with the real mini-swe-agent 2.x from PyPI on a bubblewrap sandbox: gold
forced through the HTTP gateway earns 1, a no-op 0, every prompt extends the earlier prompt plus
its completion bit-exact; a crashing or hanging harness ends classified with its sandbox released."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gymfleet.envs.harness.env import HarnessEnv
from gymfleet.envs.harness.harnesses import gold_replies, noop_replies
from gymfleet.orchestrator.gateway import Gateway
from gymfleet.orchestrator.harness_rollout import HarnessRollout
from gymfleet.orchestrator.http.forcing import ScriptedRepliesEngine
from gymfleet.orchestrator.http.server import HttpGateway
from gymfleet.orchestrator.http.tree import SessionRegistry
from gymfleet.orchestrator.rollout import RolloutRequest
from tests.orchestrator.fake_engine import RecordingEngine

pytestmark = [pytest.mark.bwrap, pytest.mark.model, pytest.mark.timeout(300)]

TASK = "append-line-apple"


def make_env(harness: str = "mini-swe-agent") -> HarnessEnv:
    return HarnessEnv(harness=harness, task_env="gymfleet/TerminalEasy-v0", task_kwargs={"sandbox": "local"},
                      grading_reserve_s=10, linger_s=1)


async def play(tokenizer: Any, harness: str, replies: list[str], env: HarnessEnv | None = None,
               timeout_s: float = 120) -> tuple[HarnessRollout, RecordingEngine, HarnessEnv]:
    scripted = ScriptedRepliesEngine(tokenizer)
    engine = RecordingEngine(scripted)
    registry = SessionRegistry(Gateway(tokenizer, engine))
    request = RolloutRequest("run", "g", "g/0/0", "gymfleet/Harness-v0", TASK, rollout_timeout_s=timeout_s)
    scripted.script(request.rollout_id, replies)
    env = env or make_env(harness)
    async with HttpGateway(registry) as server:
        rollout = HarnessRollout(request, lambda: env, registry, server)
        await rollout.run()
    return rollout, engine, env


@pytest.mark.parametrize("harness", ["mini-swe-agent", "mini-swe-agent-text"])
async def test_gold_through_the_harness_earns_1_token_exact(bwrap_available: bool, smollm_tokenizer: Any,
                                                            harness: str) -> None:
    gold = gold_replies(harness, make_env(harness).gold_policy(TASK).actions)  # type: ignore[attr-defined]
    rollout, engine, env = await play(smollm_tokenizer, harness, gold)
    traj = rollout.trajectories[-1]
    assert (traj.status.value, traj.reason, traj.reward) == ("ok", "", 1.0)
    assert traj.metrics["harness_exit"] == "Submitted" and len(rollout.trajectories) == 1
    assert traj.metrics["calls"] == len(gold) == len(engine.prompts) and traj.metrics["continued"] == len(gold) - 1
    ids = traj.token_ids.tolist()
    forced = [smollm_tokenizer.encode(r, add_special_tokens=False) + [smollm_tokenizer.eos_token_id] for r in gold]
    for prompt, completion, later in zip(engine.prompts, forced, [*engine.prompts[1:], ids]):
        assert later[: len(prompt) + len(completion)] == prompt + completion
    assert traj.token_ids[traj.loss_mask == 1].tolist() == [t for c in forced for t in c]
    assert env.task._episode is None  # type: ignore[attr-defined]  # the sandbox was released


@pytest.mark.parametrize("harness", ["mini-swe-agent", "smolagents"])
async def test_noop_through_the_harness_earns_0(bwrap_available: bool, smollm_tokenizer: Any, harness: str) -> None:
    rollout, engine, env = await play(smollm_tokenizer, harness, noop_replies(harness))
    traj = rollout.trajectories[-1]
    assert (traj.status.value, traj.reward, traj.metrics["harness_exit"]) == ("ok", 0.0, "Submitted")
    assert traj.metrics["calls"] == len(engine.prompts) == 1 and traj.metrics["n_commands"] == 0
    assert env.task._episode is None  # type: ignore[attr-defined]  # the sandbox was released


async def test_a_crashing_or_hanging_harness_is_classified_and_released(bwrap_available: bool,
                                                                        smollm_tokenizer: Any) -> None:
    def crash(task: str, url: str, bridge: Any) -> str:
        bridge.execute("echo started > /tmp/started")
        raise RuntimeError("harness bug")

    env = make_env()
    env.harness_fn = crash
    rollout, _, _ = await play(smollm_tokenizer, "mini-swe-agent", [], env)
    traj = rollout.trajectories[-1]
    assert traj.status.value == "infra_error" and "harness crashed: RuntimeError: harness bug" in traj.reason
    assert traj.reward == 0.0 and env.task._episode is None  # type: ignore[attr-defined]

    def hang(task: str, url: str, bridge: Any) -> str:
        time.sleep(3)
        return "never"

    env = make_env()
    env.harness_fn = hang
    started = time.monotonic()
    rollout, _, _ = await play(smollm_tokenizer, "mini-swe-agent", [], env, timeout_s=11.5)
    traj = rollout.trajectories[-1]
    assert traj.status.value == "infra_error" and "hung past the deadline outside any command" in traj.reason
    assert time.monotonic() - started < 11.5 + 5 and env.task._episode is None  # type: ignore[attr-defined]


async def test_smolagents_rewrites_its_history_into_branches_not_wrong_tokens(bwrap_available: bool,
                                                                               smollm_tokenizer: Any) -> None:
    gold = gold_replies("smolagents", make_env().gold_policy(TASK).actions)  # type: ignore[attr-defined]
    rollout, engine, env = await play(smollm_tokenizer, "smolagents", gold)
    final = rollout.trajectories[-1]
    assert (final.status.value, final.reward, final.metrics["harness_exit"]) == ("ok", 1.0, "Submitted")
    forced = [smollm_tokenizer.encode(r, add_special_tokens=False) + [smollm_tokenizer.eos_token_id] for r in gold]
    # smolagents sends its tool calls back as text messages of its own: no call extends the one before
    assert final.metrics["calls"] == len(gold) and final.metrics["branched"] == len(gold) - 1
    assert len(rollout.trajectories) == len(gold)
    for traj, prompt, completion in zip(rollout.trajectories, engine.prompts, forced):
        ids = traj.token_ids.tolist()
        assert ids[: len(prompt) + len(completion)] == prompt + completion
        assert traj.token_ids[traj.loss_mask == 1].tolist() == completion
    assert env.task._episode is None  # type: ignore[attr-defined]


def test_an_unknown_harness_is_refused_before_any_env_is_made() -> None:
    with pytest.raises(ValueError, match="unknown harness 'claude-code'.*mini-swe-agent"):
        HarnessEnv.check_kwargs({"harness": "claude-code"})


async def test_a_run_config_merged_over_mini_yaml_is_what_the_model_reads(bwrap_available: bool, smollm_tokenizer: Any,
                                                                          tmp_path: Any) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("agent:\n  instance_template: |\n    Task: {{task}}\n    Submit with echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT.\n")
    env = HarnessEnv(harness="mini-swe-agent", task_env="gymfleet/TerminalEasy-v0", task_kwargs={"sandbox": "local"},
                     grading_reserve_s=10, linger_s=1,
                     harness_config=[str(mine), "agent.system_template=You run shell commands."])
    gold = gold_replies("mini-swe-agent", env.gold_policy(TASK).actions)  # type: ignore[attr-defined]
    rollout, engine, _ = await play(smollm_tokenizer, "mini-swe-agent", gold, env)
    traj = rollout.trajectories[-1]
    assert (traj.status.value, traj.reward, traj.metrics["harness_exit"]) == ("ok", 1.0, "Submitted")
    first = smollm_tokenizer.decode(engine.prompts[0])
    assert "You run shell commands." in first and "Task: " in first and "<tool_call>" in first  # mini.yaml's tools kept
    assert "Recommended Workflow" not in first  # mini.yaml's own instance template replaced
    assert len(engine.prompts[0]) < 400  # ~1,100 tokens with mini.yaml's


def test_a_harness_config_that_cannot_be_read_or_applied_is_refused_in_one_line(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match=r"harness_config 'nope\.yaml': no such mini-swe-agent config file"):
        HarnessEnv.check_kwargs({"harness": "mini-swe-agent", "harness_config": ["nope.yaml"]})
    bad = tmp_path / "list.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="a mini-swe-agent config is a YAML mapping"):
        HarnessEnv.check_kwargs({"harness": "mini-swe-agent", "harness_config": [str(bad)]})
    with pytest.raises(ValueError, match="harness_config is for .*smolagents takes none"):
        HarnessEnv.check_kwargs({"harness": "smolagents", "harness_config": ["mini.yaml"]})
