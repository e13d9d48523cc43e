"""One learner per run, on SQLite and PostgreSQL: a second live learner is refused at start and
never releases the first one's claims; a learner whose seat was taken is fenced off; a dead one's
claims come back to its successor at once."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.orchestrator.store.claims import new_learner_id
from gymfleet.orchestrator.store.errors import LearnerBusyError
from gymfleet.trainer.source import StoreGroupSource
from tests.orchestrator.store.conftest import StoreTarget, fill_group

RUN = "run-seat"


def dead_learner_id() -> str:
    """The identity of a learner process on this host that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return f"learner@{socket.gethostname()}:{proc.pid}:deadbeef"


async def test_learners_get_distinct_identities() -> None:
    a, b = new_learner_id(), new_learner_id()
    assert a != b and a.startswith("learner@") and f":{__import__('os').getpid()}:" in a


async def test_a_second_live_learner_is_refused_and_leaves_the_first_ones_claims(target: StoreTarget) -> None:
    async with await target.open() as first_store, await target.open() as second_store:
        await first_store.start_run(RUN, {})
        for name in ("alpha", "beta"):
            await fill_group(first_store, RUN, name, size=2)
        first = StoreGroupSource(first_store, RUN)
        first_id = new_learner_id()
        await first.take_seat(first_id, lease_s=600)
        held = await first.claim_groups(1, first_id, lease_s=600)
        second = StoreGroupSource(second_store, RUN)
        with pytest.raises(LearnerBusyError, match=f"run {RUN} already has a live learner .*{first_id}"):
            await second.take_seat(new_learner_id(), lease_s=600)
        # the first learner's claim is intact: nobody else gets its group
        others = await second_store.claim_groups(5, "anyone", lease_s=60, run_id=RUN)
        assert len(others.groups) == 1 and not set(others.group_ids) & {g.group_id for g in held}


async def test_a_learner_whose_seat_was_taken_is_fenced_off(target: StoreTarget) -> None:
    async with await target.open() as store:
        await store.start_run(RUN, {})
        await fill_group(store, RUN, "alpha", size=2)
        slow, fresh = StoreGroupSource(store, RUN), StoreGroupSource(store, RUN)
        slow_id, fresh_id = new_learner_id(), new_learner_id()
        await slow.take_seat(slow_id, lease_s=0.2)
        await asyncio.sleep(0.4)  # the seat's lease runs out (a stalled learner)
        await fresh.take_seat(fresh_id, lease_s=600)
        with pytest.raises(LearnerBusyError, match=f"{slow_id} was fenced off"):
            await slow.claim_groups(1, slow_id, lease_s=600)
        assert len(await fresh.claim_groups(1, fresh_id, lease_s=600)) == 1


async def test_a_dead_learners_claims_come_back_to_its_successor_at_once(target: StoreTarget) -> None:
    async with await target.open() as store:
        await store.start_run(RUN, {})
        group = await fill_group(store, RUN, "alpha", size=2)
        dead = dead_learner_id()
        await store.take_learner_seat(RUN, dead, lease_s=600)
        assert (await store.claim_groups(1, dead, lease_s=600, run_id=RUN, fence=True)).group_ids == [group.group_id]
        successor = StoreGroupSource(store, RUN)
        successor_id = new_learner_id()
        assert await successor.take_seat(successor_id, lease_s=600) == 1
        assert [g.group_id for g in await successor.claim_groups(1, successor_id, lease_s=600)] == [group.group_id]


async def test_a_learner_that_stopped_cleanly_leaves_the_seat_free(target: StoreTarget) -> None:
    async with await target.open() as store:
        first, second = StoreGroupSource(store, RUN), StoreGroupSource(store, RUN)
        await first.take_seat(new_learner_id(), lease_s=600)
        await first.leave_seat()
        assert await second.take_seat(new_learner_id(), lease_s=600) == 0
