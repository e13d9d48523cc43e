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
