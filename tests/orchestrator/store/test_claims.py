"""Learner claims on SQLite and PostgreSQL: atomic, exclusive, expiring, acked once."""

from __future__ import annotations

import asyncio

import pytest

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.orchestrator.store.errors import ClaimExpiredError
from tests.orchestrator.store.conftest import StoreTarget, fill_group, make_trajectory

RUN = "run-c"


async def test_only_complete_groups_are_claimed_with_their_trajectories(store: TrajectoryStore) -> None:
    await store.start_run(RUN, {})
    group = await fill_group(store, RUN, "alpha", size=3, rewards=[1.0, 0.0, 1.0])
    from gymfleet.orchestrator.store import GroupSpec

    store.create_group(GroupSpec(f"{RUN}/echo/p0/beta", RUN, "echo", "e", "beta", 3))  # never finished
    claim = await store.claim_groups(10, "learner-0", lease_s=60)
    assert claim.group_ids == [group.group_id]
    (claimed,) = claim.groups
    assert [t.reward for t in claimed.trajectories] == [1.0, 0.0, 1.0]
    assert claimed.trajectories[0].n_tokens == 50
    await store.ack(claim)
    assert (await store.claim_groups(10, "learner-0", lease_s=60)).groups == []


async def test_a_samples_branches_are_stored_and_claimed_with_it(store: TrajectoryStore) -> None:
    from gymfleet.orchestrator.store import GroupSpec

    await store.start_run(RUN, {})
    group = GroupSpec(f"{RUN}/echo/p0/alpha", RUN, "echo", "gymfleet-test/Echo-v0", "alpha", 2)
    store.create_group(group)
    for i, sample_id in enumerate(group.sample_ids()):
        traj = make_trajectory(RUN, group.group_id, i, reward=float(i))
        if i == 0:  # a harness session with two earlier leaves (docs/harness.md)
            traj.branches = [make_trajectory(RUN, group.group_id, 10 + k, n_tokens=20 + k) for k in (1, 2)]
            for k, branch in enumerate(traj.branches, start=1):
                branch.rollout_id, branch.metrics["branch_of"] = f"{traj.rollout_id}#{k}", traj.rollout_id
        store.start_sample(sample_id, traj.rollout_id)
        store.add(traj, sample_id=sample_id, task="echo")
    # an earlier, failed attempt's branch is stored but belongs to no claimed sample
    stray = make_trajectory(RUN, group.group_id, 30)
    stray.rollout_id, stray.metrics["branch_of"] = f"{group.group_id}/0/a0#1", f"{group.group_id}/0/a0"
    store.add(stray, task="echo")
    await store.flush()
    stored = await store.trajectories(RUN, limit=None)
    assert len(stored) == 5  # every leaf is a row
    (claimed,) = (await store.claim_groups(10, "learner-0", lease_s=60)).groups
    first, second = claimed.trajectories
    assert [t.reward for t in claimed.trajectories] == [0.0, 1.0] and second.branches == []
    assert [(b.rollout_id, b.n_tokens) for b in first.branches] == [
        (f"{first.rollout_id}#1", 21), (f"{first.rollout_id}#2", 22)]
    assert first.branches[0].token_ids.tolist() == make_trajectory(RUN, group.group_id, 11, n_tokens=21).token_ids.tolist()


async def test_racing_claimers_never_share_a_group(target: StoreTarget) -> None:
    n_groups = 40
    async with await target.open() as store:
        await store.start_run(RUN, {})
        for i in range(n_groups):
            await fill_group(store, RUN, f"i{i:03d}", size=2)
    stores = [await target.open() for _ in range(2)]  # two learners, separate connections
    try:
        async def learner(store: TrajectoryStore, name: str) -> list[str]:
            got: list[str] = []
            while True:
                claim = await store.claim_groups(3, name, lease_s=60)
                if not claim.groups:
                    return got
                got += claim.group_ids
                await store.ack(claim)

        a, b = await asyncio.gather(learner(stores[0], "a"), learner(stores[1], "b"))
    finally:
        for s in stores:
            await s.close()
    assert not set(a) & set(b)
    assert len(a) + len(b) == n_groups == len(set(a) | set(b))


async def test_a_dead_claimers_groups_come_back_after_the_lease(store: TrajectoryStore) -> None:
    await store.start_run(RUN, {})
    group = await fill_group(store, RUN, "alpha", size=2)
    dead = await store.claim_groups(5, "dies", lease_s=0.3)
    assert dead.group_ids == [group.group_id]
    assert (await store.claim_groups(5, "other", lease_s=60)).groups == []  # still held
    await asyncio.sleep(0.5)
    again = await store.claim_groups(5, "other", lease_s=60)
    assert again.group_ids == [group.group_id]
    with pytest.raises(ClaimExpiredError, match="longer lease_s"):
        await store.ack(dead)  # the dead claimer cannot consume what it lost
    await store.ack(again)
    assert (await store.claim_groups(5, "third", lease_s=60)).groups == []


async def test_release_makes_groups_claimable_at_once(store: TrajectoryStore) -> None:
    await store.start_run(RUN, {})
    await fill_group(store, RUN, "alpha", size=2)
    claim = await store.claim_groups(1, "a", lease_s=600)
    await store.release(claim)
    assert (await store.claim_groups(1, "b", lease_s=600)).group_ids == claim.group_ids


async def test_consume_by_id_is_idempotent_and_ends_a_lost_claim(store: TrajectoryStore) -> None:
    await store.start_run(RUN, {})
    a = await fill_group(store, RUN, "a")
    b = await fill_group(store, RUN, "b")
    claim = await store.claim_groups(10, "learner-0", lease_s=0.01)
    assert sorted(claim.group_ids) == sorted([a.group_id, b.group_id])
    await asyncio.sleep(0.05)  # the lease runs out: a restarted learner acks by id, not by token
    assert await store.consume_groups([a.group_id]) == 1
    assert await store.consume_groups([a.group_id]) == 0
    assert await store.consume_groups([]) == 0
    again = await store.claim_groups(10, "learner-1", lease_s=60)
    assert again.group_ids == [b.group_id]


async def test_a_restarted_claimer_takes_back_its_own_claims(store: TrajectoryStore) -> None:
    await store.start_run(RUN, {})
    a = await fill_group(store, RUN, "a")
    held = await store.claim_groups(10, "learner", lease_s=3600)
    assert held.group_ids == [a.group_id]
    assert await store.release_claims_of("someone-else", RUN) == 0
    assert await store.release_claims_of("learner", RUN) == 1
    assert (await store.claim_groups(10, "learner", lease_s=60)).group_ids == [a.group_id]


async def test_the_earliest_created_complete_group_is_claimed_first(store: TrajectoryStore) -> None:
    """A group started earlier (an older policy version) goes to the learner before a later group
    that happened to finish sooner, so an async run's slow groups do not go stale waiting."""
    from gymfleet.orchestrator.store import GroupSpec
    from tests.orchestrator.store.conftest import make_trajectory

    await store.start_run(RUN, {})
    old = GroupSpec(f"{RUN}/echo/p0/old", RUN, "echo", "gymfleet-test/Echo-v0", "old", 2)
    store.create_group(old)
    await store.flush()
    await asyncio.sleep(0.05)
    new = await fill_group(store, RUN, "new", size=2)  # created later, complete first
    for i, sample_id in enumerate(old.sample_ids()):
        traj = make_trajectory(RUN, old.group_id, i, reward=1.0)
        store.start_sample(sample_id, traj.rollout_id)
        store.add(traj, sample_id=sample_id, task="echo")
    await store.flush()
    first = await store.claim_groups(1, "learner-0", lease_s=60)
    second = await store.claim_groups(1, "learner-0", lease_s=60)
    assert (first.group_ids, second.group_ids) == ([old.group_id], [new.group_id])
