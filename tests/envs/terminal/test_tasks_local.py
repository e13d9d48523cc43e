"""Every built-in task on the bubblewrap backend: gold solution 1, no-op 0."""

from __future__ import annotations

import pytest

from gymfleet.envs.sandbox.local import LocalBackend
from tests.envs.terminal.tasks_check import BUILTIN_TASK_IDS, check_gold_and_noop

pytestmark = pytest.mark.bwrap


@pytest.mark.parametrize("task_id", BUILTIN_TASK_IDS)
async def test_gold_1_noop_0(local_backend: LocalBackend, task_id: str) -> None:
    await check_gold_and_noop(local_backend, task_id)


async def test_end_async_grades_the_state_as_it_stands(local_backend: LocalBackend) -> None:
    """A caller's turn limit (the orchestrator's) cuts the episode: the work done still counts."""
    from gymfleet.envs.terminal import TerminalEnv

    env = TerminalEnv(sandbox=local_backend, task_ids=["permissions"])
    try:
        await env.reset_async(options={"instance_id": "permissions"})
        gold = env.gold_policy()
        await env.step_async(await gold.act(""))  # the solution, without submitting
        reward, info = await env.end_async("reached max_turns=1")
        assert reward == 1.0 and info["ended_by_caller"] == "reached max_turns=1"
        assert await env.end_async("again") == (0.0, {})
    finally:
        await env.close_async()
