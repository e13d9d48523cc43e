"""The easy tier (``gymfleet/TerminalEasy-v0``): the folders match their generator; on bubblewrap
each template's gold command earns 1, the no-op 0, and the same command on a wrong word 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.envs.base import ConstantPolicy
from gymfleet.envs.episode import run_episode
from gymfleet.envs.sandbox.local import LocalBackend
from gymfleet.envs.terminal import TerminalEnv
from gymfleet.envs.actions import bash_block
from gymfleet.envs.terminal.prompts import BRIEF_SYSTEM_PROMPT, SYSTEM_PROMPT
from gymfleet.envs.terminal.easy import (EASY_TASKS_DIR, HELDOUT_WORDS, TEMPLATES, TRAIN_WORDS, all_tasks,
                                         heldout_ids, write_tasks)


def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode & 0o777)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_folders_on_disk_are_what_the_generator_writes(tmp_path: Path) -> None:
    assert write_tasks(tmp_path / "easy") == len(TEMPLATES) * (len(TRAIN_WORDS) + len(HELDOUT_WORDS))
    assert _tree(tmp_path / "easy") == _tree(EASY_TASKS_DIR), (
        "envs/terminal/tasks-easy/ is stale: run python -m gymfleet.envs.terminal.easy")


def test_held_out_words_are_not_training_words() -> None:
    assert not set(HELDOUT_WORDS) & set(TRAIN_WORDS)
    assert set(heldout_ids()) <= set(all_tasks()) and len(heldout_ids()) == len(HELDOUT_WORDS) * len(TEMPLATES)


def test_the_registered_env_plays_the_easy_folder() -> None:
    import gymfleet

    env = gymfleet.make("gymfleet/TerminalEasy-v0", sandbox="local").unwrapped
    try:
        assert sorted(env.instance_ids()) == sorted(all_tasks())
        assert env.system_prompt == BRIEF_SYSTEM_PROMPT and len(BRIEF_SYSTEM_PROMPT) < len(SYSTEM_PROMPT) / 5
    finally:
        env.close()


@pytest.mark.bwrap
@pytest.mark.parametrize("task_id", [f"{t}-{w}" for t in TEMPLATES for w in (TRAIN_WORDS[0], HELDOUT_WORDS[0])])
async def test_gold_1_noop_0_wrong_word_0(local_backend: LocalBackend, task_id: str) -> None:
    env = TerminalEnv(sandbox=local_backend, tasks_dir=EASY_TASKS_DIR, task_ids=[task_id])
    word = task_id.rsplit("-", 1)[1]
    wrong = bash_block(env.tasks[task_id].solution_script.replace(word, "wrongword"))
    try:
        gold = await run_episode(env, env.gold_policy(task_id), instance_id=task_id)
        noop = await run_episode(env, ConstantPolicy(env.noop_action), instance_id=task_id)
        await env.reset_async(options={"instance_id": task_id})
        await env.step_async(wrong)
        wrong_reward, wrong_info = await env.end_async("reached max_turns=1")
    finally:
        await env.close_async()
    assert gold.reward == 1.0, (gold.turns[0].observation, gold.info["grading"])
    assert noop.reward == 0.0 and noop.info["grading"]["error"] is None
    assert wrong_reward == 0.0 and wrong_info["grading"]["error"] is None, wrong_info["grading"]


def _default_easy_entries() -> list[dict]:
    import yaml

    config = yaml.safe_load((Path(__file__).resolve().parents[3] / "configs" / "train-default.yaml").read_text())
    return [t for t in config["tasks"] if t["env_id"] == "gymfleet/TerminalEasy-v0"]


def test_the_prompt_gives_the_turns_the_default_run_allows() -> None:
    """For every easy instance the default config trains on, the first observation under that
    task's ``max_turns`` says exactly that many turns (it once said 2 where max_turns was 1)."""
    import re

    from gymfleet.envs.terminal.prompts import first_observation
    from gymfleet.envs.terminal.task import load_tasks

    entries = _default_easy_entries()
    assert entries
    tasks = load_tasks(EASY_TASKS_DIR)
    for entry in entries:
        for task_id in entry.get("instances") or list(tasks):
            said = re.search(r"You have (\d+) turns?;", first_observation(tasks[task_id], entry["max_turns"]))
            assert said is not None and int(said.group(1)) == entry["max_turns"], task_id


@pytest.mark.bwrap
async def test_reset_with_the_runs_max_turns_tells_and_enforces_it(local_backend: LocalBackend) -> None:
    (entry,) = _default_easy_entries()
    task_id = entry["instances"][0]
    env = TerminalEnv(sandbox=local_backend, tasks_dir=EASY_TASKS_DIR, task_ids=[task_id])
    try:
        obs, info = await env.reset_async(options={"instance_id": task_id, "max_turns": entry["max_turns"]})
        assert f"You have {entry['max_turns']} turn;" in obs and info["max_turns"] == entry["max_turns"] == 1
        _, reward, terminated, truncated, _ = await env.step_async(bash_block(env.tasks[task_id].solution_script))
        assert (reward, terminated, truncated) == (1.0, False, True)  # graded at the run's limit
        obs, info = await env.reset_async(options={"instance_id": task_id})  # no caller limit: the task's own
        assert f"You have {env.tasks[task_id].config.max_agent_turns} turns;" in obs
    finally:
        await env.close_async()
