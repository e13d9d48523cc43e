"""Admission as one policy of the orchestrator (orchestrator/admission.py), fed by the learner's
progress: generation runs at most ``max_staleness + 1`` learner steps ahead, on a real scheduler
over the test env (so extra groups never go stale); lock-step is the same policy at 0."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from gymfleet.orchestrator import Admission, LearnerProgress
from gymfleet.orchestrator.admission import STARVED_S
from gymfleet.orchestrator.store import TrajectoryStore
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


def _config(tmp_path: Path, max_in_flight: int = 64, tasks: tuple[str, ...] = ("a",)):
    return run_config(tmp_path, [task(name, group_size=GROUP, env_kwargs={"n_instances": 64}) for name in tasks],
                      max_in_flight=max_in_flight)


async def test_generation_stops_max_staleness_plus_one_steps_ahead_and_follows_the_learner(tmp_path: Path) -> None:
    async with await TrajectoryStore.open(str(tmp_path / "store.db")) as store:
        scheduler = await make_scheduler(_config(tmp_path), store, admission=Admission(1, groups_per_step=2))
        runner = asyncio.create_task(scheduler.run())
        await _settle(scheduler, (1 + 1) * 2 * GROUP)
        assert scheduler.stats.completed == (1 + 1) * 2 * GROUP  # two steps' groups, no more: max_in_flight is 64
        scheduler.learner_progressed(LearnerProgress(steps=1))  # the learner took a step: one more step's groups
        await _settle(scheduler, 3 * 2 * GROUP)
        assert scheduler.stats.completed == 3 * 2 * GROUP
        scheduler.learner_progressed(LearnerProgress(steps=1, extra_groups=1))  # a refill asked for one group
        await _settle(scheduler, 3 * 2 * GROUP + GROUP)
        assert scheduler.stats.completed == 3 * 2 * GROUP + GROUP
        scheduler.learner_progressed(LearnerProgress(steps=1, extra_groups=1))  # counters unchanged: nothing more
        await _settle(scheduler, 7 * GROUP)
        assert scheduler.stats.completed == 7 * GROUP and scheduler.admission.group_budget == 0
        scheduler.request_stop()
        await runner


async def test_lock_step_is_the_same_policy_at_max_staleness_0(tmp_path: Path) -> None:
    async with await TrajectoryStore.open(str(tmp_path / "store.db")) as store:
        scheduler = await make_scheduler(_config(tmp_path), store, admission=Admission(0, groups_per_step=2))
        runner = asyncio.create_task(scheduler.run())
        for steps in range(3):  # each step the learner claims lets exactly one step's groups start
            scheduler.learner_progressed(LearnerProgress(steps=steps))
            await _settle(scheduler, (steps + 1) * 2 * GROUP)
            assert scheduler.stats.completed == (steps + 1) * 2 * GROUP
        scheduler.request_stop()
        await runner


async def test_without_a_staleness_bound_generation_is_not_held(tmp_path: Path) -> None:
    async with await TrajectoryStore.open(str(tmp_path / "store.db")) as store:
        scheduler = await make_scheduler(_config(tmp_path, max_in_flight=4), store,
                                         admission=Admission(None, groups_per_step=2))
        scheduler.learner_progressed(LearnerProgress(steps=5, extra_groups=2))
        assert scheduler.admission.group_budget is None
        runner = asyncio.create_task(scheduler.run())
        while scheduler.stats.completed < 10 * 2 * GROUP:  # well past any step budget (64 groups in all)
            await asyncio.sleep(0.01)
        scheduler.request_stop()
        await runner


async def test_a_quarantined_task_that_holds_the_budget_gets_one_more_step_of_groups(tmp_path: Path) -> None:
    """Groups handed to a task that is then quarantined never complete: with the budget spent and
    nothing in flight admission must let more groups start, or the learner waits for ever."""
    async with await TrajectoryStore.open(str(tmp_path / "store.db")) as store:
        scheduler = await make_scheduler(_config(tmp_path, tasks=("a", "b")), store,
                                         admission=Admission(0, groups_per_step=2))
        runner = asyncio.create_task(scheduler.run())
        await _settle(scheduler, 2 * GROUP)
        assert scheduler.stats.completed == 2 * GROUP  # one step's groups (max_staleness 0)
        scheduler.learner_progressed(LearnerProgress())
        assert scheduler.admission.group_budget == 0  # spent, but nothing was lost: no grant
        scheduler.work["a"].quarantine("test: replicas gone")
        scheduler.admission.last_step_at = time.monotonic() - STARVED_S  # no learner step for STARVED_S
        scheduler.learner_progressed(LearnerProgress())  # one step's groups: task b takes them
        await _settle(scheduler, 4 * GROUP)
        assert scheduler.stats.completed == 4 * GROUP  # started and finished by task b
        scheduler.request_stop()
        await runner


def test_the_policy_alone() -> None:
    gate = Admission(2)  # a collection: the staleness gate only
    assert gate.group_budget is None and gate.may_create(first_claim=False)
    assert not gate.stale(5, 3) and gate.stale(6, 3) and not gate.stale(6, None)
    assert not Admission(None).stale(100, 0)
    ahead = Admission(1, groups_per_step=4)
    assert ahead.group_budget == 8
    ahead.created(8)
    assert not ahead.may_create(first_claim=False) and ahead.may_create(first_claim=True)
    assert ahead.progressed(LearnerProgress(steps=2, extra_groups=3), now=0.0) == 2 * 4 + 3
    assert ahead.progressed(LearnerProgress(steps=1, extra_groups=1), now=1.0) == 0  # counters never go back
    ahead.created(11)
    assert ahead.unstarve(in_flight=0, any_quarantined=True, now=STARVED_S - 1) == 0  # not long enough
    assert ahead.unstarve(in_flight=1, any_quarantined=True, now=STARVED_S) == 0  # something still runs
    assert ahead.unstarve(in_flight=0, any_quarantined=False, now=STARVED_S) == 0  # nothing was lost
    assert ahead.unstarve(in_flight=0, any_quarantined=True, now=STARVED_S) == 4 and ahead.group_budget == 4
