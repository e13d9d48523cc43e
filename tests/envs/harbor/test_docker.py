"""Harbor-v0 on Docker, on tasks written here: builds from Dockerfiles, gold 1, no-op 0, and each
way a verifier can go wrong (failing, timing out, fetching offline) or a task cannot be built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gymfleet.envs.check import check_env_async
from gymfleet.envs.harbor.build import HarborImageBuilder
from gymfleet.envs.harbor.dockerfile import UnbuildableError
from gymfleet.envs.harbor.env import EXAMPLES_DIR, HarborEnv
from gymfleet.envs.harbor.task import load_task

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]  # builds images: minutes on a loaded machine
TASKS = Path(__file__).resolve().parent / "tasks"


async def _play(path: Path, task_id: str, actions: list[str]) -> tuple[dict[str, Any], float, dict[str, Any]]:
    """Plays ``actions`` (the last must end the episode); returns (reset info, reward, last info)."""
    env = HarborEnv(sandbox="docker", path=str(path), task_ids=[task_id])
    try:
        _, reset_info = await env.reset_async(options={"instance_id": task_id})
        for action in actions:
            _, reward, terminated, truncated, info = await env.step_async(action)
            if terminated or truncated:
                return reset_info, reward, info
        raise AssertionError(f"{task_id}: the episode did not end after {actions}")
    finally:
        await env.close_async()


async def _gold(path: Path, task_id: str) -> tuple[dict[str, Any], float, dict[str, Any]]:
    env = HarborEnv(sandbox="docker", path=str(path), task_ids=[task_id])
    return await _play(path, task_id, env.gold_actions(env.instance(task_id)))


async def test_examples_pass_the_env_contract(docker_available: bool) -> None:
    """apt + pip + COPY + WORKDIR + ENV (harbor-hello) and TB1 with uv and pytest fetched by the
    verifier (tb1-hello): gold earns 1, no-op earns 0."""
    report = await check_env_async("gymfleet/Harbor-v0", env_kwargs={"sandbox": "docker"})
    assert report.gold_rewards == {"harbor-hello": 1.0, "tb1-hello": 1.0}
    assert report.noop_rewards == {"harbor-hello": 0.0, "tb1-hello": 0.0}


async def test_reward_json_keys_reach_info_and_the_substitution_is_recorded(docker_available: bool) -> None:
    reset_info, reward, info = await _gold(EXAMPLES_DIR, "harbor-hello")
    assert reward == 1.0 and info["grading"]["extra"] == {"greeting_ok": 1.0, "count_ok": 1.0}
    assert reset_info["base_substitution"][0].startswith("python:3.11-slim -> gymfleet/base ")
    _, reward, info = await _play(EXAMPLES_DIR, "harbor-hello", ["```bash\necho '{\"greeting\": \"hello harbor\"}' > /app/out.json\n```", "submit"])
    assert reward == 0.0 and info["grading"]["extra"] == {"greeting_ok": 1.0, "count_ok": 0.0}


async def test_a_verifier_that_writes_no_reward_is_a_grading_error(docker_available: bool) -> None:
    _, reward, info = await _gold(TASKS, "failing-verifier")
    assert reward == 0.0 and "neither" in info["grading_error"] and info["grading"]["exit_code"] == 3


async def test_a_verifier_past_its_timeout_is_a_grading_error(docker_available: bool) -> None:
    _, reward, info = await _gold(TASKS, "verifier-timeout")
    assert reward == 0.0 and info["grading_error"] == "verifier timed out after 3 s" and info["grading"]["timed_out"]


async def test_allow_internet_runs_without_network_and_says_so(docker_available: bool) -> None:
    probe = "```bash\n(exec 3<>/dev/tcp/pypi.org/443) 2>/dev/null && echo ONLINE || echo OFFLINE\n```"
    env = HarborEnv(sandbox="docker", path=str(TASKS), task_ids=["offline-task"])
    try:
        first, info = await env.reset_async(options={"instance_id": "offline-task", "max_turns": 2})
        assert info["network"] is False and info["allow_internet"] is True and "without network" in info["network_note"]
        assert "You have 2 turns" in first and info["max_turns"] == 2  # the run's lower limit is told
        observation, *_ = await env.step_async(probe)
        assert "OFFLINE" in observation
    finally:
        await env.close_async()
    _, reward, _ = await _gold(TASKS, "offline-task")
    assert reward == 1.0


async def test_a_verifier_fetching_uv_and_pytest_grades_offline(docker_available: bool) -> None:
    """A task in Harbor's newer schema, FROM a registry mirror, whose verifier runs uvx with
    `--no-cache-dir`, `-w` and `--with`: before, it was refused (schema), then unbuildable
    (mirror), then graded 0 (staging a no-op)."""
    reset_info, reward, info = await _gold(TASKS, "uvx-verifier")
    assert reward == 1.0, info["grading"]["output_tail"]  # the oracle wrote $ANSWER_FILE: [environment.env] applied
    assert reset_info["base_substitution"][0].startswith(
        "public.ecr.aws/docker/library/ubuntu:24.04 -> gymfleet/base-trixie")
    assert reset_info["task_toml"]["unknown_keys"] == [] and reset_info["allow_internet"] is False
    _, reward, info = await _play(TASKS, "uvx-verifier", ["submit"])
    assert reward == 0.0 and info["grading"]["error"] is None


async def test_an_unpullable_from_is_unbuildable_in_one_line(docker_available: bool) -> None:
    env = HarborEnv(sandbox="docker", path=str(TASKS), task_ids=["unbuildable-from"])
    try:
        with pytest.raises(UnbuildableError) as caught:
            await env.reset_async(options={"instance_id": "unbuildable-from"})
    finally:
        await env.close_async()
    assert "\n" not in str(caught.value) and str(caught.value).startswith("unbuildable: FROM nvcr.io/nvidia/cuda")


def test_a_cached_image_is_not_rebuilt(docker_available: bool) -> None:
    builder = HarborImageBuilder()
    task = load_task(TASKS / "failing-verifier")
    first = builder.ensure(task)
    again = builder.ensure(task)
    assert (again.tag, again.built) == (first.tag, False) and again.workdir == "/app"


async def test_a_task_with_a_non_root_user_runs_and_grades(docker_available: bool) -> None:
    # the agent's commands failed (mkdir /run/gymfleet-exec/...: Permission denied), and the
    # verifier, run as that user too, could not make or write /logs/verifier
    _, reward, info = await _gold(TASKS, "nonroot-user")
    assert reward == 1.0 and info.get("grading_error") is None, info
    _, reward, info = await _play(TASKS, "nonroot-user", ["submit"])
    assert reward == 0.0 and info.get("grading_error") is None, info


async def test_an_image_entrypoint_that_does_not_exec_its_arguments_runs_as_in_harbor(docker_available: bool) -> None:
    # before: the entrypoint was PID 1 beside the keep-alive, stopping the agent's processes
    # failed and every episode (no-op and oracle alike) could not be graded
    reset_info, reward, info = await _gold(TASKS, "entrypoint-service")
    assert reset_info["entrypoint"] == ["/usr/local/bin/start.sh"]
    assert reward == 1.0 and info.get("grading_error") is None, info.get("grading", info)  # its service up for agent and tests
    _, reward, info = await _play(TASKS, "entrypoint-service", ["submit"])
    assert reward == 0.0 and info.get("grading_error") is None, info.get("grading", info)
