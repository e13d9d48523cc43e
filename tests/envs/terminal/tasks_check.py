"""Shared by the per-backend task tests: every built-in task's gold earns 1, a no-op 0."""

from __future__ import annotations

from gymfleet.envs.base import ConstantPolicy
from gymfleet.envs.episode import run_episode
from gymfleet.envs.sandbox.base import SandboxBackend
from gymfleet.envs.terminal import TerminalEnv
from gymfleet.envs.terminal.task import BUILTIN_TASKS_DIR

BUILTIN_TASK_IDS = sorted(p.name for p in BUILTIN_TASKS_DIR.iterdir() if (p / "task.yaml").is_file())


async def check_gold_and_noop(backend: SandboxBackend, task_id: str) -> None:
    """Plays the gold solution, then the no-op agent, on ``task_id``; asserts 1 then 0."""
    env = TerminalEnv(sandbox=backend, task_ids=[task_id])
    try:
        await env.reset_async(options={"instance_id": task_id})
        gold = await run_episode(env, env.gold_policy(), instance_id=task_id)
        noop = await run_episode(env, ConstantPolicy(env.noop_action), instance_id=task_id)
    finally:
        await env.close_async()
    assert gold.reward == 1.0, (gold.turns[0].observation, gold.info["grading"])
    assert gold.terminated and not gold.truncated
    assert noop.reward == 0.0, noop.info["grading"]
    assert noop.info["grading"]["error"] is None, "the no-op must fail the tests, not break grading"
