"""The async ahead budget (gymfleet/run/local.py): generation runs at most ``max_staleness + 1``
learner steps ahead, on a real scheduler over the test env (so extra groups never go stale)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.run.local import AheadBudget
from tests.orchestrator.conftest import run_config, task
from tests.orchestrator.test_scheduler import make_scheduler

GROUP = 3


async def _settle(scheduler, completed: int) -> None:
    """Until ``completed`` rollouts have finished and nothing is in flight (however slow the
    machine: no deadline but the test's own), then a little longer, so that a rollout the budget
    should not have let start shows up in the count."""
    while scheduler.stats.completed < completed or scheduler.stats.in_flight:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)


async def test_generation_stops_max_staleness_plus_one_steps_ahead_and_follows_the_learner(tmp_path: Path) -> None:
    async with await TrajectoryStore.open(str(tmp_path / "store.db")) as store:
        cfg = run_config(tmp_path, [task("a", group_size=GROUP, env_kwargs={"n_instances": 64})], max_in_flight=64)
        scheduler = await make_scheduler(cfg, store)
        ahead = AheadBudget(max_staleness=1, groups_per_step=2)
        ahead.open(scheduler)
        runner = asyncio.create_task(scheduler.run())
        await _settle(scheduler, (1 + 1) * 2 * GROUP)
        assert scheduler.stats.completed == (1 + 1) * 2 * GROUP  # two steps' groups, no more: max_in_flight is 64
        ahead.top_up(scheduler, steps=1, refills=0)  # the learner took a step: one more step's groups
        await _settle(scheduler, 3 * 2 * GROUP)
        assert scheduler.stats.completed == 3 * 2 * GROUP
        ahead.top_up(scheduler, steps=1, refills=1)  # a dynamic-sampling refill asked for one group
        await _settle(scheduler, 3 * 2 * GROUP + GROUP)
        assert scheduler.stats.completed == 3 * 2 * GROUP + GROUP
        ahead.top_up(scheduler, steps=1, refills=1)  # counters unchanged: nothing more
        await _settle(scheduler, 7 * GROUP)
        assert scheduler.stats.completed == 7 * GROUP and scheduler.group_budget == 0
        scheduler.request_stop()
        await runner


async def test_without_a_staleness_bound_generation_is_not_held(tmp_path: Path) -> None:
    async with await TrajectoryStore.open(str(tmp_path / "store.db")) as store:
        cfg = run_config(tmp_path, [task("a", group_size=GROUP, env_kwargs={"n_instances": 64})], max_in_flight=4)
        scheduler = await make_scheduler(cfg, store)
        ahead = AheadBudget(max_staleness=None, groups_per_step=2)
        ahead.open(scheduler)
        ahead.top_up(scheduler, steps=5, refills=2)
        assert scheduler.group_budget is None
        runner = asyncio.create_task(scheduler.run())
        while scheduler.stats.completed < 10 * 2 * GROUP:  # well past any step budget (64 groups in all)
            await asyncio.sleep(0.01)
        scheduler.request_stop()
        await runner


async def test_a_quarantined_task_that_holds_the_budget_is_reported_starved(tmp_path: Path) -> None:
    """Groups handed to a task that is then quarantined never complete: with the budget spent and
    nothing in flight the job must let more groups start, or the learner waits for ever."""
    async with await TrajectoryStore.open(str(tmp_path / "store.db")) as store:
        cfg = run_config(tmp_path, [task("a", group_size=GROUP, env_kwargs={"n_instances": 64}),
                                    task("b", group_size=GROUP, env_kwargs={"n_instances": 64})], max_in_flight=64)
        scheduler = await make_scheduler(cfg, store)
        ahead = AheadBudget(max_staleness=0, groups_per_step=2)
        ahead.open(scheduler)
        runner = asyncio.create_task(scheduler.run())
        await _settle(scheduler, 2 * GROUP)
        assert scheduler.stats.completed == 2 * GROUP  # one step's groups (max_staleness 0)
        assert scheduler.group_budget == 0 and not ahead.starved(scheduler)  # spent, but nothing was lost
        scheduler.work["a"].quarantine("test: replicas gone")
        assert ahead.starved(scheduler)
        scheduler.add_group_budget(2)  # what the job grants after STARVED_S: task b takes them
        await _settle(scheduler, 4 * GROUP)
        assert scheduler.stats.completed == 4 * GROUP  # started and finished by task b
        assert ahead.starved(scheduler)  # spent again: the job grants again if the learner still waits
        scheduler.request_stop()
        await runner
        assert AheadBudget(max_staleness=None, groups_per_step=2).starved(scheduler) is False
