"""TerminalEnv's episode logic: format, persistence, limits, grading, tampering, release.

Backend-dependent behaviour runs on the fake sandbox and on bubblewrap (``bwrap``)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from gymfleet.envs.base import ScriptedPolicy
from gymfleet.envs.episode import run_episode
from gymfleet.envs.errors import SandboxStartError, TaskError
from gymfleet.envs.sandbox.base import SandboxBackend
from gymfleet.envs.terminal import TerminalEnv
from tests.envs.terminal.conftest import write_task
from tests.envs.terminal.fake_sandbox import FakeBackend


@pytest.fixture(params=["fake", pytest.param("local", marks=pytest.mark.bwrap),
                        pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> SandboxBackend:
    if request.param == "fake":
        return FakeBackend()
    return request.getfixturevalue(f"{request.param}_backend")


def bash(script: str) -> str:
    return f"```bash\n{script}\n```"


async def play(env: TerminalEnv, actions: list[str], instance_id: str = "done") -> list[tuple]:
    await env.reset_async(options={"instance_id": instance_id})
    steps = []
    for action in actions:
        steps.append(await env.step_async(action))
        if steps[-1][2] or steps[-1][3]:
            break
    return steps


async def test_cwd_exports_and_functions_persist_and_timeouts_roll_back(backend: SandboxBackend,
                                                                        tmp_path: Path) -> None:
    write_task(tmp_path, "done", yaml="instruction: x\ntimeout_s: 2\nmax_agent_turns: 10\n")
    env = TerminalEnv(sandbox=backend, tasks_dir=tmp_path)
    steps = await play(env, [
        bash("mkdir -p sub/deeper && cd sub && export FOO='a b' && greet() { echo \"hi $1\"; }"),
        bash("pwd; echo \"FOO=$FOO\"; greet you; cd deeper"),
        bash("cd / && export FOO=changed && sleep 30"),
        bash("pwd; echo \"FOO=$FOO\""),
        bash("exit 3"),
        bash("pwd"),
        "submit",
    ])
    obs = [s[0] for s in steps]
    assert "exit code 0" in obs[0]
    assert "/sub\n" in obs[1] and "FOO=a b" in obs[1] and "hi you" in obs[1]
    assert "timed out" in obs[2] and steps[2][4]["timed_out"]
    assert obs[3].count("/sub/deeper") == 1 and "FOO=a b" in obs[3]  # the killed command's changes are gone
    assert "exit code 3" in obs[4] and "/sub/deeper" in obs[5]
    await env.close_async()


async def test_malformed_actions_count_as_turns_and_never_raise(fake_backend: FakeBackend, tasks_dir: Path) -> None:
    env = TerminalEnv(sandbox=fake_backend, tasks_dir=tasks_dir)
    steps = await play(env, ["ls", bash("ls") + "\n" + bash("pwd"), "```python\nprint(1)\n```", "", "```bash\n\n```"])
    assert [s[4]["turn"] for s in steps] == [1, 2, 3, 4, 5]
    assert all("Nothing was run" in s[0] and "```bash" in s[0] for s in steps)
    assert all(s[1] == 0.0 for s in steps[:-1])
    # max_agent_turns is 5: the fifth malformed turn truncates the episode, graded: reward 0.
    assert steps[-1][3] and not steps[-1][2] and steps[-1][4]["grading"]["reward"] == 0.0


async def test_turn_limit_truncates_and_grades_the_end_state(fake_backend: FakeBackend, tasks_dir: Path) -> None:
    env = TerminalEnv(sandbox=fake_backend, tasks_dir=tasks_dir)
    idle = await play(env, [bash("true")] * 10)
    assert len(idle) == 5 and idle[-1][3] and not idle[-1][2] and idle[-1][1] == 0.0
    assert "Turn limit (5) reached" in idle[-1][0]
    # Work done but never submitted still counts, as Terminal-Bench grades after a timeout.
    worked = await play(env, [bash("echo yes > done.txt")] + [bash("true")] * 10)
    assert worked[-1][3] and worked[-1][1] == 1.0
    await env.close_async()


async def test_command_time_budget_truncates(fake_backend: FakeBackend, tmp_path: Path) -> None:
    write_task(tmp_path, "done", yaml="instruction: x\nagent_timeout_s: 1.5\ntimeout_s: 1\n")
    env = TerminalEnv(sandbox=fake_backend, tasks_dir=tmp_path)
    steps = await play(env, [bash("sleep 5")] * 5)
    assert len(steps) == 2 and steps[-1][3] and "budget" in steps[-1][0]


async def test_tampering_with_results_scores_0(backend: SandboxBackend, tasks_dir: Path) -> None:
    fake = '{"nonce": "x", "tests": [{"name": "test_done", "status": "passed"}]}'
    env = TerminalEnv(sandbox=backend, tasks_dir=tasks_dir)
    cheat = bash(
        f"for d in . /tmp /tmp/.gymfleet .gymfleet /logs/verifier; do mkdir -p $d 2>/dev/null; "
        f"for f in result.json results.json reward.json; do echo '{fake}' > $d/$f 2>/dev/null; done; done\n"
        "echo 1 > /logs/verifier/reward.txt 2>/dev/null\n"
        "mkdir -p fakebin && printf '#!/bin/sh\\necho pass\\n' > fakebin/python3 && chmod +x fakebin/python3\n"
        "export PATH=$PWD/fakebin:$PATH GYMFLEET_RESULT_FILE=$PWD/result.json GYMFLEET_NONCE=x\n"
        "printf 'import sys\\nsys.exit(0)\\n' > unittest.py; cp unittest.py gymfleet_testlib.py"
    )
    steps = await play(env, [cheat, "submit"])
    assert "exit code 0" in steps[0][0]
    grading = steps[-1][4]["grading"]
    assert steps[-1][1] == 0.0 and grading["tests"] == {"Checks.test_done": "error"}, grading


async def test_gold_and_noop_on_a_custom_tasks_folder(backend: SandboxBackend, tasks_dir: Path) -> None:
    env = TerminalEnv(sandbox=backend, tasks_dir=tasks_dir)
    await env.reset_async(options={"instance_id": "done"})
    gold = await run_episode(env, env.gold_policy(), instance_id="done")
    noop = await run_episode(env, ScriptedPolicy([env.noop_action]), instance_id="done")
    assert (gold.reward, noop.reward) == (1.0, 0.0)
    assert gold.terminated and not gold.truncated and len(gold.turns) == 2
    assert gold.info["grading"]["tests"] == {"Checks.test_done": "passed"}
    await env.close_async()


async def test_long_output_is_cut(backend: SandboxBackend, tasks_dir: Path) -> None:
    env = TerminalEnv(sandbox=backend, tasks_dir=tasks_dir, max_output_bytes=2000)
    steps = await play(env, [bash("seq 1 100000; echo oops >&2")])
    assert "cut: 588895 bytes" in steps[0][0] and "100000" in steps[0][0] and "oops" in steps[0][0]
    assert len(steps[0][0]) < 3000
    await env.close_async()


async def test_close_releases_the_sandbox(fake_backend: FakeBackend, tasks_dir: Path) -> None:
    env = TerminalEnv(sandbox=fake_backend, tasks_dir=tasks_dir)
    await play(env, [bash("sleep 1000 > /dev/null 2>&1 &")])
    await env.close_async()
    await env.close_async()  # idempotent
    await play(env, ["submit"])  # a finished episode has released its sandbox already
    assert len(fake_backend.created) == 2 and all(sb.closed for sb in fake_backend.created)


async def test_misuse_raises_clear_errors(fake_backend: FakeBackend, tasks_dir: Path) -> None:
    env = TerminalEnv(sandbox=fake_backend, tasks_dir=tasks_dir)
    with pytest.raises(RuntimeError, match="reset"):
        await env.step_async("submit")
    with pytest.raises(KeyError, match="known: done"):
        await env.reset_async(options={"instance_id": "nope"})
    await play(env, ["submit"])
    with pytest.raises(RuntimeError, match="reset"):
        await env.step_async("submit")


async def test_broken_setup_and_missing_tools_release_the_sandbox(fake_backend: FakeBackend, tmp_path: Path) -> None:
    write_task(tmp_path, "badsetup", setup="echo setting up; exit 4")
    write_task(tmp_path, "needs", yaml="instruction: x\nrequires: [bash, no-such-tool-xyz]\n")
    env = TerminalEnv(sandbox=fake_backend, tasks_dir=tmp_path)
    with pytest.raises(TaskError, match="exit 4"):
        await env.reset_async(options={"instance_id": "badsetup"})
    with pytest.raises(SandboxStartError, match="no-such-tool-xyz"):
        await env.reset_async(options={"instance_id": "needs"})
    assert all(sb.closed for sb in fake_backend.created)


def test_sync_gymnasium_api(fake_backend: FakeBackend, tasks_dir: Path) -> None:
    env = TerminalEnv(sandbox=fake_backend, tasks_dir=tasks_dir)
    obs, info = env.reset(seed=0)
    assert "Write yes to done.txt" in obs and info["instance_id"] == "done"
    obs, reward, terminated, truncated, info = env.step(bash("echo yes > done.txt"))
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert env.step("submit")[1:4] == (1.0, True, False)
    env.close()


async def test_close_leaves_no_sandbox_behind(backend: SandboxBackend, tasks_dir: Path) -> None:
    run_id = f"terminal-test-{uuid.uuid4().hex[:8]}"
    env = TerminalEnv(sandbox=backend, tasks_dir=tasks_dir, run_id=run_id)
    await play(env, [bash("nohup sleep 1000 > /dev/null 2>&1 &")])
    await env.close_async()
    assert await backend.gc(run_id=run_id, expired_only=False) == 0, "close left a sandbox to reap"
