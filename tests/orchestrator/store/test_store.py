"""The trajectory store on SQLite and PostgreSQL: round trips, transactions, restarts, queries."""

from __future__ import annotations

import numpy as np
import pytest

from gymfleet.core.records import RolloutStatus
from gymfleet.orchestrator.store import GroupSpec, TrajectoryStore
from gymfleet.orchestrator.store.errors import RunNotFoundError, StoreClosedError, StoreURLError, StoreWriteError
from tests.orchestrator.store.conftest import StoreTarget, fill_group, make_trajectory

RUN = "run-a"


async def test_roundtrip_is_token_exact(store: TrajectoryStore) -> None:
    await store.start_run(RUN, {"note": "test"})
    sent = [make_trajectory(RUN, f"{RUN}/g", i, n_tokens=n) for i, n in enumerate([0, 1, 4097])]
    for traj in sent:
        assert await store.add(traj, task="echo") is True
    got = {s.trajectory.rollout_id: s for s in await store.trajectories(RUN, limit=None)}
    for traj in sent:
        back = got[traj.rollout_id].trajectory
        for name, dtype in [("token_ids", np.int32), ("loss_mask", np.uint8), ("logprobs", np.float32),
                            ("versions", np.int32)]:
            array = getattr(back, name)
            assert array.dtype == dtype
            assert np.array_equal(array, getattr(traj, name))
        assert back.messages == traj.messages
        assert back.metrics == traj.metrics and back.timings == traj.timings
        assert back.status is RolloutStatus.ok and back.reward == traj.reward
        assert got[traj.rollout_id].task == "echo"


async def test_a_failing_rollout_loses_no_other_of_its_batch(store: TrajectoryStore) -> None:
    await store.start_run(RUN, {})
    good = [make_trajectory(RUN, f"{RUN}/g", i) for i in range(10)]
    bad = make_trajectory("no-such-run", f"{RUN}/g", 99)  # foreign key to runs fails
    futures = [store.add(t) for t in good[:5]] + [store.add(bad)] + [store.add(t) for t in good[5:]]
    await store.flush()
    assert all(f.result() is True for f in futures[:5] + futures[6:])
    with pytest.raises(StoreWriteError, match="no-such-run"):
        futures[5].result()
    stored = {s.trajectory.rollout_id for s in await store.trajectories(RUN, limit=None)}
    assert stored == {t.rollout_id for t in good}
    assert store.n_failed == 1


async def test_duplicate_rollout_is_refused_and_the_first_kept(store: TrajectoryStore) -> None:
    await store.start_run(RUN, {})
    traj = make_trajectory(RUN, f"{RUN}/g", 0)
    assert await store.add(traj) is True
    with pytest.raises(StoreWriteError):
        await store.add(make_trajectory(RUN, f"{RUN}/g", 0, reward=0.0))
    (only,) = await store.trajectories(RUN)
    assert only.trajectory.reward == 1.0


async def test_a_database_error_is_one_line_without_sql_or_binary_parameters(store: TrajectoryStore) -> None:
    await store.start_run(RUN, {})
    assert await store.add(make_trajectory(RUN, f"{RUN}/g", 0, n_tokens=4096)) is True
    with pytest.raises(StoreWriteError) as info:
        await store.add(make_trajectory(RUN, f"{RUN}/g", 0, n_tokens=4096))
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    assert "[SQL" not in message and "parameters" not in message and "\\x" not in message and "memory at" not in message
    assert message.startswith(f"trajectory {RUN}/g/0/a1 of run {RUN}: ") and ("unique" in message.lower() or "duplicate" in message.lower())


async def test_rollout_with_its_sample_lands_whole(store: TrajectoryStore) -> None:
    await store.start_run(RUN, {})
    group = GroupSpec(f"{RUN}/echo/p0/alpha", RUN, "echo", "gymfleet-test/Echo-v0", "alpha", 2)
    store.create_group(group)
    sample = group.sample_ids()[0]
    traj = make_trajectory(RUN, group.group_id, 0)
    traj.metrics = {"bad": object()}  # made JSON-safe, not an error
    store.start_sample(sample, traj.rollout_id)
    assert await store.add(traj, sample_id=sample, task="echo") is True
    summary = await store.run_summary(RUN)
    assert summary.n_groups == 1 and summary.n_groups_complete == 0


async def test_restart_aborts_in_flight_and_requeues(target: StoreTarget) -> None:
    async with await target.open() as store:
        await store.start_run(RUN, {})
        group = GroupSpec(f"{RUN}/echo/p0/alpha", RUN, "echo", "gymfleet-test/Echo-v0", "alpha", 3)
        store.create_group(group)
        ids = group.sample_ids()
        done = make_trajectory(RUN, group.group_id, 0)
        store.start_sample(ids[0], done.rollout_id)
        store.add(done, sample_id=ids[0], task="echo")
        store.start_sample(ids[1], f"{group.group_id}/1/a1")  # in flight when "killed"
        await store.flush()
    async with await target.open() as store:
        resume = await store.start_run(RUN, {})
        assert resume.restarted and resume.n_aborted == 1 and resume.n_done == 1
        assert [s.sample_id for s in resume.pending] == ids[1:]
        assert resume.group_ids == {group.group_id}
        aborted = await store.trajectories(RUN, status=RolloutStatus.aborted)
        assert [a.trajectory.rollout_id for a in aborted] == [f"{group.group_id}/1/a1"]
        assert "requeued" in aborted[0].trajectory.reason
        # The attempt that was aborted can no longer settle its sample if it ever reports.
        late = make_trajectory(RUN, group.group_id, 1)
        late.rollout_id = f"{group.group_id}/1/late"
        assert await store.add(late, sample_id=ids[1], task="echo") is False
        summary = await store.run_summary(RUN)
        assert summary.n_starts == 2 and summary.by_status == {"ok": 2, "aborted": 1}


async def test_queries_list_and_show(store: TrajectoryStore) -> None:
    await store.start_run(RUN, {"tasks": ["echo"]})
    await fill_group(store, RUN, "alpha", size=2, rewards=[1.0, 0.0])
    (run,) = await store.list_runs()
    assert run.run_id == RUN and run.n_groups_complete == 1 and run.n_trajectories == 2
    summary = await store.run_summary(RUN)
    assert summary.config == {"tasks": ["echo"]}
    (task,) = summary.tasks
    assert task.task == "echo" and task.mean_reward_ok == pytest.approx(0.5)
    with pytest.raises(RunNotFoundError, match="run-a"):
        await store.run_summary("nope")


async def test_closed_store_and_bad_url_fail_clearly(store: TrajectoryStore) -> None:
    await store.close()
    with pytest.raises(StoreClosedError, match="open a new one"):
        store.add(make_trajectory(RUN, "g", 0))
    with pytest.raises(StoreURLError, match="sqlite:///PATH"):
        await TrajectoryStore.open("mysql://x@y/z")
