"""Sample leases: several orchestrators on one run claim disjoint samples, and a start requeues
only what nobody holds any more (PostgreSQL); SQLite refuses a second live orchestrator."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from itertools import islice

import pytest

from gymfleet.core.records import RolloutStatus
from gymfleet.orchestrator.store import GroupSpec, SampleRef, TrajectoryStore, new_owner
from gymfleet.orchestrator.store.errors import RunBusyError
from tests.orchestrator.store.conftest import StoreTarget, make_trajectory

RUN = "run-l"
N_GROUPS, SIZE = 10, 4


def groups() -> list[GroupSpec]:
    return [GroupSpec(f"{RUN}/echo/p0/i{i:02d}", RUN, "echo", "gymfleet-test/Echo-v0", f"i{i:02d}", SIZE)
            for i in range(N_GROUPS)]


def enumerator() -> Callable[[int], list[GroupSpec]]:
    """What one orchestrator would create next: every orchestrator enumerates the same groups."""
    it = iter(groups())

    def next_groups(n_samples: int) -> list[GroupSpec]:
        return list(islice(it, -(-n_samples // SIZE)))

    return next_groups


def other_host_owner(name: str) -> str:
    return f"elsewhere.invalid:1:{name}"  # not this host: only its lease says whether it lives


async def claim_all(store: TrajectoryStore, owner: str) -> tuple[list[str], int]:
    next_groups = enumerator()
    got, created = [], 0
    while True:
        claim = await store.claim_samples(RUN, "echo", owner, 3, lease_s=60, next_groups=next_groups)
        created += claim.n_created
        if not claim.samples:
            return got, created
        got += [s.sample_id for s in claim.samples]
        await asyncio.sleep(0.02)  # a gap, as rollouts run: SQLite's busy handler is not fair


async def test_two_claimers_take_disjoint_samples_and_create_each_group_once(target: StoreTarget) -> None:
    async with await target.open() as store:
        await store.start_run(RUN, {})
    stores = [await target.open() for _ in range(2)]  # two orchestrators, separate connections
    try:
        (a, created_a), (b, created_b) = await asyncio.gather(
            claim_all(stores[0], new_owner()), claim_all(stores[1], new_owner()))
        assert all(s.n_failed == 0 for s in stores)
    finally:
        for s in stores:
            await s.close()
    assert a and b and not set(a) & set(b)
    assert set(a) | set(b) == {sid for g in groups() for sid in g.sample_ids()}
    assert created_a + created_b == N_GROUPS


async def test_creating_a_group_twice_is_a_no_op_not_an_error(target: StoreTarget) -> None:
    stores = [await target.open() for _ in range(2)]
    try:
        await stores[0].start_run(RUN, {})
        results = await asyncio.gather(*(s.create_group(g) for g in groups() for s in stores))
        assert sorted(results) == [False] * N_GROUPS + [True] * N_GROUPS
        assert all(s.n_failed == 0 for s in stores)
    finally:
        for s in stores:
            await s.close()


async def start_claimed(store: TrajectoryStore, owner: str, n: int, lease_s: float) -> list[SampleRef]:
    claim = await store.claim_samples(RUN, "echo", owner, n, lease_s=lease_s, next_groups=enumerator())
    for s in claim.samples:
        store.start_sample(s.sample_id, f"{s.sample_id}/a1")
    await store.flush()
    return claim.samples


@pytest.mark.postgres
@pytest.mark.parametrize("target", ["postgres"], indirect=True)
async def test_a_start_requeues_expired_leases_and_leaves_live_ones(target: StoreTarget) -> None:
    stores = [await target.open() for _ in range(3)]
    dead, live, starting = other_host_owner("dead"), other_host_owner("live"), new_owner()
    try:
        await stores[0].start_run(RUN, {}, owner=dead, lease_s=0.3)
        await stores[1].start_run(RUN, {}, owner=live, lease_s=60)
        lost = await start_claimed(stores[0], dead, 2, lease_s=0.3)
        held = await start_claimed(stores[1], live, 2, lease_s=60)
        await asyncio.sleep(0.6)  # the dead one's heartbeat never comes
        resume = await stores[2].start_run(RUN, {}, owner=starting, lease_s=60)
        assert resume.n_aborted == 2
        aborted = await stores[2].trajectories(RUN, status=RolloutStatus.aborted)
        assert sorted(t.trajectory.rollout_id for t in aborted) == sorted(f"{s.sample_id}/a1" for s in lost)
        # The live one finishes what it holds; the starting one claims the requeued samples.
        for s in held:
            traj = make_trajectory(RUN, s.group_id, s.sample_idx)
            assert await stores[1].add(traj, sample_id=s.sample_id, task="echo") is True
        again = await stores[2].claim_samples(RUN, "echo", starting, 100, lease_s=60)
        assert {s.sample_id for s in lost} <= {s.sample_id for s in again.samples}
        assert not {s.sample_id for s in held} & {s.sample_id for s in again.samples}
        assert all(s.n_failed == 0 for s in stores)
    finally:
        for s in stores:
            await s.close()


@pytest.mark.postgres
@pytest.mark.parametrize("target", ["postgres"], indirect=True)
async def test_a_renewed_lease_outlives_its_first_expiry_and_a_late_attempt_writes_nothing(
    target: StoreTarget,
) -> None:
    stores = [await target.open() for _ in range(2)]
    slow, peer = other_host_owner("slow"), new_owner()
    try:
        await stores[0].start_run(RUN, {}, owner=slow, lease_s=0.4)
        (sample, other) = await start_claimed(stores[0], slow, 2, lease_s=0.4)
        for _ in range(4):  # the heartbeat keeps both alive past 0.4 s ...
            await asyncio.sleep(0.2)
            assert await stores[0].renew_leases(RUN, slow, lease_s=0.4) == 2
        assert (await stores[1].claim_samples(RUN, "echo", peer, 100, lease_s=60)).n_requeued == 0
        await asyncio.sleep(0.6)  # ... until it stops: a peer's claim requeues them
        assert (await stores[1].claim_samples(RUN, "echo", peer, 100, lease_s=60)).n_requeued == 2
        late = make_trajectory(RUN, sample.group_id, sample.sample_idx)
        assert late.rollout_id == f"{sample.sample_id}/a1"  # recorded as aborted by the peer already
        assert await stores[0].add(late, sample_id=sample.sample_id, task="echo") is False
        assert stores[0].n_failed == 0  # no duplicate key: the late attempt is dropped, said by False
    finally:
        for s in stores:
            await s.close()


@pytest.mark.postgres
@pytest.mark.parametrize("target", ["postgres"], indirect=True)
async def test_several_orchestrators_start_a_new_run_at_once(target: StoreTarget) -> None:
    stores = [await target.open() for _ in range(3)]
    try:
        resumes = await asyncio.gather(*(s.start_run(RUN, {}, owner=new_owner()) for s in stores))
        assert sorted(r.restarted for r in resumes) == [False, True, True]
        assert (await stores[0].run_summary(RUN)).n_starts == 3
    finally:
        for s in stores:
            await s.close()


def dead_local_owner() -> str:
    """An owner name of this host whose process has exited."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    host, _, rest = new_owner().partition(":")
    return f"{host}:{proc.pid}:{rest.partition(':')[2]}"


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
async def test_sqlite_refuses_a_second_live_orchestrator_and_resumes_a_dead_ones(target: StoreTarget) -> None:
    async with await target.open() as store:
        await store.start_run(RUN, {}, owner=other_host_owner("first"), lease_s=0.5)
        with pytest.raises(RunBusyError, match=r"held by another live orchestrator .*use a PostgreSQL store"):
            await store.start_run(RUN, {}, owner=new_owner(), lease_s=0.5)
        await asyncio.sleep(0.7)  # its lease ran out: it is dead, the run resumes
        await store.start_run(RUN, {}, owner=dead_local_owner(), lease_s=60)
        # An owner on this host whose process is gone is not waited for.
        resume = await store.start_run(RUN, {}, owner=new_owner(), lease_s=60)
        assert resume.restarted
        assert (await store.run_summary(RUN)).n_starts == 3
