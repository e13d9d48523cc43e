"""The scheduler against test envs and a scripted gateway: caps, ratios, staleness, failures, stops."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from gymfleet.core.records import RolloutStatus
from gymfleet.orchestrator.admission import Admission
from gymfleet.orchestrator.config import RunConfig
from gymfleet.orchestrator.envfactory import env_factory, resolve_instances
from gymfleet.orchestrator.metrics import MetricsWriter
from gymfleet.orchestrator.scheduler import RunOutcome, Scheduler
from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.orchestrator.store.schema import RunStatus
from tests.orchestrator.conftest import run_config, task
from tests.orchestrator.fakes import ScriptedGateway, SlowEchoEnv


async def make_scheduler(cfg: RunConfig, store: TrajectoryStore, gateway: ScriptedGateway | None = None,
                         peaks: Counter[str] | None = None, admission: Admission | None = None) -> Scheduler:
    factories, instances = {}, {}
    live: Counter[str] = Counter()
    for t in cfg.tasks:
        make = env_factory(t)
        instances[t.name] = await resolve_instances(t, make)

        def counted(make=make, name=t.name):
            env = make()
            live[name] += 1
            if peaks is not None:
                peaks[name] = max(peaks[name], live[name])
            close = env.close_async

            async def close_and_count():
                live[name] -= 1
                await close()

            env.close_async = close_and_count
            return env

        factories[t.name] = counted
    return Scheduler(cfg, store, gateway or ScriptedGateway(), factories, instances, admission=admission)


async def final_by_sample(store: TrajectoryStore, run_id: str = "r1") -> dict[str, list[RolloutStatus]]:
    by_sample: dict[str, list[RolloutStatus]] = {}
    for s in await store.trajectories(run_id, limit=None):
        sample = s.trajectory.rollout_id.rsplit("/", 1)[0]
        by_sample.setdefault(sample, []).append(s.trajectory.status)
    return by_sample


async def test_run_does_every_sample_once_within_the_caps(tmp_path: Path, sqlite_store: TrajectoryStore) -> None:
    cfg = run_config(tmp_path, [task("a", max_in_flight=2), task("b", env_kwargs={"n_instances": 4})],
                     max_in_flight=5)
    open_before = SlowEchoEnv.open_envs
    peaks: Counter[str] = Counter()
    scheduler = await make_scheduler(cfg, sqlite_store, peaks=peaks)
    outcome = await scheduler.run()
    assert outcome.status is RunStatus.completed and outcome.completed == (6 + 4) * 3
    assert scheduler.stats.peak_in_flight <= 5 and peaks["a"] <= 2
    assert SlowEchoEnv.open_envs == open_before  # every env closed
    by_sample = await final_by_sample(sqlite_store)
    assert len(by_sample) == 30 and all(v == [RolloutStatus.ok] for v in by_sample.values())
    (run,) = await sqlite_store.list_runs()
    assert run.status == "completed" and run.n_groups_complete == run.n_groups == 10


async def run_until(scheduler: Scheduler, n_completed: int) -> RunOutcome:
    """Runs the scheduler until ``n_completed`` rollouts ended, then stops it."""
    runner = asyncio.create_task(scheduler.run())
    while scheduler.stats.completed < n_completed and not runner.done():
        await asyncio.sleep(0.01)
    scheduler.request_stop()
    return await runner


async def test_completions_follow_the_weights_and_change_live(tmp_path: Path, sqlite_store: TrajectoryStore) -> None:
    slow = {"n_instances": 50, "step_delay_s": 0.02}
    fast = {"n_instances": 50, "step_delay_s": 0.002}
    cfg = run_config(tmp_path, [task("a", weight=3, passes=None, env_kwargs=slow),
                                task("b", weight=1, passes=None, env_kwargs=fast)], max_in_flight=8)
    scheduler = await make_scheduler(cfg, sqlite_store)
    runner = asyncio.create_task(scheduler.run())
    while scheduler.stats.completed < 200:
        await asyncio.sleep(0.01)
    done = {n: t.completed for n, t in scheduler.stats.tasks.items()}
    assert 2.4 < done["a"] / done["b"] < 3.6, done
    scheduler.set_weights({"b": 0.0})
    started_b = scheduler.stats.tasks["b"].completed + scheduler.stats.tasks["b"].in_flight
    while scheduler.stats.completed < 300:
        await asyncio.sleep(0.01)
    scheduler.request_stop()
    await runner
    assert scheduler.stats.tasks["b"].completed == started_b  # none admitted after weight 0


async def test_auto_mix_favours_tasks_whose_groups_disagree(tmp_path: Path, sqlite_store: TrajectoryStore) -> None:
    cfg = run_config(
        tmp_path,
        [task("solved", passes=None, group_size=4, env_kwargs={"n_instances": 40}),
         task("coin", env="Coin-v0", passes=None, group_size=4, env_kwargs={"n_instances": 40})],
        auto_mix={"enabled": True, "floor": 0.1, "window_groups": 8},
    )
    scheduler = await make_scheduler(cfg, sqlite_store)
    await run_until(scheduler, 600)  # long enough that the 1:1 warm-up before the windows fill is diluted
    done = {n: t.completed for n, t in scheduler.stats.tasks.items()}
    assert done["coin"] > 3 * done["solved"], done
    assert scheduler.mix.disagreement("solved") == 0.0
    assert scheduler.mix.effective_weight("coin") > 4 * scheduler.mix.effective_weight("solved")


async def test_staleness_gate_pauses_until_old_rollouts_finish(tmp_path: Path, sqlite_store: TrajectoryStore) -> None:
    cfg = run_config(tmp_path, [task("a", env_kwargs={"step_delay_s": 0.3})], max_in_flight=4, max_staleness=0)
    gateway = ScriptedGateway()
    scheduler = await make_scheduler(cfg, sqlite_store, gateway)
    runner = asyncio.create_task(scheduler.run())
    while scheduler.stats.in_flight < 4:
        await asyncio.sleep(0.01)
    gateway.version = 1  # a new adapter is published
    started = scheduler.stats.completed + scheduler.stats.in_flight
    saw_pause = False
    while scheduler.stats.completed < 4:
        saw_pause |= scheduler.stats.paused == "staleness"
        assert scheduler.stats.completed + scheduler.stats.in_flight == started  # nothing admitted
        await asyncio.sleep(0.02)
    outcome = await runner
    assert saw_pause
    assert outcome.status is RunStatus.completed and outcome.by_status == {"ok": 18}


async def test_broken_infrastructure_is_quarantined_not_retried_forever(
    tmp_path: Path, sqlite_store: TrajectoryStore
) -> None:
    cfg = run_config(tmp_path, [task("broken", env="BrokenSandbox-v0", max_attempts=2), task("ok")],
                     quarantine_after=3, max_in_flight=1)
    scheduler = await make_scheduler(cfg, sqlite_store)
    outcome = await scheduler.run()
    assert outcome.status is RunStatus.interrupted
    assert "broken quarantined after 3 consecutive" in outcome.quarantined["broken"]
    assert "gymfleet images build" in outcome.quarantined["broken"]
    summary = {t.task: t.by_status for t in (await sqlite_store.run_summary("r1")).tasks}
    assert summary == {"broken": {"infra_error": 3}, "ok": {"ok": 18}}


async def test_stop_aborts_in_flight_and_restart_completes(tmp_path: Path, sqlite_store: TrajectoryStore) -> None:
    open_before = SlowEchoEnv.open_envs
    slow = run_config(tmp_path, [task("a", env_kwargs={"step_delay_s": 30})], max_in_flight=5,
                      shutdown={"mode": "finish", "deadline_s": 0.2})
    scheduler = await make_scheduler(slow, sqlite_store)
    runner = asyncio.create_task(scheduler.run())
    while scheduler.stats.in_flight < 5:
        await asyncio.sleep(0.01)
    scheduler.request_stop()
    first = await runner
    assert first.status is RunStatus.interrupted and first.by_status == {"aborted": 5}
    assert SlowEchoEnv.open_envs == open_before  # sandboxes released
    fast = run_config(tmp_path, [task("a")])
    second = await (await make_scheduler(fast, sqlite_store)).run()
    assert second.status is RunStatus.completed and second.n_requeued == 6  # 5 aborted + 1 never started
    by_sample = await final_by_sample(sqlite_store)
    assert len(by_sample) == 18
    assert sum(v.count(RolloutStatus.ok) for v in by_sample.values()) == 18
    assert all(v.count(RolloutStatus.ok) == 1 for v in by_sample.values())
    assert sum(v.count(RolloutStatus.aborted) for v in by_sample.values()) == 5


async def test_finish_mode_lets_in_flight_rollouts_end(tmp_path: Path, sqlite_store: TrajectoryStore) -> None:
    cfg = run_config(tmp_path, [task("a", env_kwargs={"step_delay_s": 0.2})], max_in_flight=3,
                     shutdown={"mode": "finish", "deadline_s": 10})
    scheduler = await make_scheduler(cfg, sqlite_store)
    runner = asyncio.create_task(scheduler.run())
    while scheduler.stats.in_flight < 3:
        await asyncio.sleep(0.01)
    scheduler.request_stop()
    outcome = await runner
    assert outcome.by_status == {"ok": 3}


async def test_a_stop_on_a_spent_budget_completes_the_run(tmp_path: Path, sqlite_store: TrajectoryStore) -> None:
    cfg = run_config(tmp_path, [task("a", passes=None, env_kwargs={"step_delay_s": 0.05})], max_in_flight=2,
                     shutdown={"mode": "finish", "deadline_s": 10})
    scheduler = await make_scheduler(cfg, sqlite_store)
    runner = asyncio.create_task(scheduler.run())
    while scheduler.stats.completed < 2:
        await asyncio.sleep(0.01)
    scheduler.request_stop(budget_spent=True)
    outcome = await runner
    assert outcome.status is RunStatus.completed_budget and outcome.status.value == "completed (budget)"
    assert (await sqlite_store.run_summary("r1")).status == "completed (budget)"


async def test_the_end_of_a_training_budget_aborts_quietly(tmp_path: Path, sqlite_store: TrajectoryStore,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """The learner is done: one stop that aborts what is in flight, no Ctrl-C wording."""
    cfg = run_config(tmp_path, [task("a", passes=None, env_kwargs={"step_delay_s": 0.05})], max_in_flight=2,
                     shutdown={"mode": "finish", "deadline_s": 10})
    scheduler = await make_scheduler(cfg, sqlite_store)
    runner = asyncio.create_task(scheduler.run())
    while scheduler.stats.completed < 2:
        await asyncio.sleep(0.01)
    caplog.set_level("INFO", logger="gymfleet")
    caplog.set_level("INFO", logger="orchestrator")
    scheduler.request_stop(budget_spent=True, abort=True)
    outcome = await runner
    assert outcome.status is RunStatus.completed_budget
    words = " ".join(r.getMessage() for r in caplog.records if r.levelno >= 30)
    assert "stop request" not in words and "Ctrl-C" not in words


async def test_weights_edited_in_the_config_file_apply_live(tmp_path: Path, sqlite_store: TrajectoryStore) -> None:
    import yaml

    from gymfleet.run.collection import ConfigWatcher
    from gymfleet.orchestrator.config import load_run_config

    path = tmp_path / "r1.yaml"
    data = run_config(tmp_path, [task("a", passes=None), task("b", passes=None)]).model_dump(mode="json")
    path.write_text(yaml.safe_dump(data))
    cfg = load_run_config(path)
    watcher = ConfigWatcher(path, [])
    assert watcher() is None  # unchanged
    scheduler = await make_scheduler(cfg, sqlite_store)
    scheduler.reload_config = watcher
    metrics = MetricsWriter(tmp_path / "metrics.jsonl").__enter__()
    scheduler.metrics = metrics
    runner = asyncio.create_task(scheduler.run())
    while scheduler.stats.completed < 30:
        await asyncio.sleep(0.01)
    data["tasks"][1]["weight"] = 0.0
    path.write_text(yaml.safe_dump(data))
    while scheduler.mix.weights["b"] != 0.0:
        await asyncio.sleep(0.05)
    started_b = scheduler.stats.tasks["b"].completed + scheduler.stats.tasks["b"].in_flight
    while scheduler.stats.completed < 80:
        await asyncio.sleep(0.01)
    scheduler.request_stop()
    await runner
    metrics.__exit__(None, None, None)
    assert scheduler.stats.tasks["b"].completed == started_b
    events = [line for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"weights"' in line]
    assert any('"event": "weights"' in e for e in events)


async def test_first_stop_request_tells_what_happens_next(
    tmp_path: Path, sqlite_store: TrajectoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = run_config(tmp_path, [task("a", env_kwargs={"n_instances": 4})])
    scheduler = await make_scheduler(cfg, sqlite_store)
    with caplog.at_level("WARNING", logger="gymfleet.orchestrator.scheduler"):
        scheduler.request_stop()
    assert "stop requested" in caplog.text and "Ctrl-C" in caplog.text


async def test_group_budget_starts_exactly_that_many_groups(tmp_path: Path, sqlite_store: TrajectoryStore) -> None:
    cfg = run_config(tmp_path, [task("a", passes=None)], max_in_flight=8)
    scheduler = await make_scheduler(cfg, sqlite_store)
    scheduler.admission.group_budget = 0
    runner = asyncio.create_task(scheduler.run())
    for n_total in (2, 3):
        scheduler.grant_groups(n_total - (2 if n_total == 3 else 0))
        while scheduler.stats.completed < 3 * n_total or scheduler.stats.in_flight:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # nothing more starts while the budget is spent
        assert scheduler.stats.completed == 3 * n_total and scheduler.admission.group_budget == 0
    scheduler.request_stop()
    await runner
    assert len(await final_by_sample(sqlite_store)) == 9


async def test_an_outage_with_no_live_replica_does_not_quarantine_the_task(
    tmp_path: Path, sqlite_store: TrajectoryStore
) -> None:
    from gymfleet.orchestrator.engines.errors import NoReplicaError
    from gymfleet.orchestrator.rollout import OUTAGE_METRIC

    cfg = run_config(tmp_path, [task("a", max_attempts=2, env_kwargs={"n_instances": 2})],
                     quarantine_after=2, max_in_flight=1)
    down = ScriptedGateway(error=NoReplicaError("no live replica after waiting 300 s"))
    outcome = await (await make_scheduler(cfg, sqlite_store, down)).run()
    assert outcome.quarantined == {} and outcome.status is RunStatus.completed, outcome
    trajectories = [s.trajectory for s in await sqlite_store.trajectories("r1", limit=None)]
    assert len(trajectories) == 12 and all(t.metrics[OUTAGE_METRIC] for t in trajectories)


async def test_a_run_that_ends_by_an_exception_does_not_read_running(tmp_path: Path,
                                                                     sqlite_store: TrajectoryStore) -> None:
    """The `.demos` run a refused training run left `running` for ever in `runs list`: a run whose
    scheduler ends by an exception (here: cancelled mid-run) is recorded as interrupted."""
    cfg = run_config(tmp_path, [task("a", env_kwargs={"step_delay_s": 0.05})], max_in_flight=2)
    scheduler = await make_scheduler(cfg, sqlite_store)
    runner = asyncio.create_task(scheduler.run())
    while scheduler.stats.completed < 1:
        await asyncio.sleep(0.01)
    (run,) = await sqlite_store.list_runs()
    assert run.status == "running"
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    (run,) = await sqlite_store.list_runs()
    assert run.status == RunStatus.interrupted.value
