"""A run on shared EnvResources: rollouts lease warm sandboxes (few cold starts), the reaper
sweeps on its timer while the run goes on, and one Chromium serves concurrent MiniWoB episodes."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from gymfleet.core.records import Message, RolloutStatus
from gymfleet.envs.registry import make_agent_env
from gymfleet.envs.resources import EnvResources, ResourcesConfig
from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.local import LocalBackendConfig
from gymfleet.envs.sandbox.local_state import read_records
from gymfleet.envs.terminal import TerminalEnv
from gymfleet.orchestrator.envfactory import env_factory, resolve_instances, unmet_needs
from gymfleet.orchestrator.scheduler import Scheduler
from gymfleet.orchestrator.store import TrajectoryStore
from tests.orchestrator.conftest import run_config
from tests.orchestrator.fakes import ScriptedGateway

TERMINAL_TASKS = ["log-errors", "word-frequency", "organize-files"]


def terminal_gold(messages: list[Message]) -> str:
    """Plays the terminal env's gold solution: the task named in the first observation."""
    task_id = messages[1].content.split("\n", 1)[0].removeprefix("Task: ").strip()
    actions = TerminalEnv(sandbox="local").gold_policy(task_id).actions  # type: ignore[attr-defined]
    n_said = sum(m.role == "assistant" for m in messages)
    return actions[min(n_said, len(actions) - 1)]


def resources_config(tmp_path: Path, **fields: object) -> ResourcesConfig:
    return ResourcesConfig.model_validate({
        "sandbox": "local", "local": LocalBackendConfig(state_dir=tmp_path / "sandboxes"), **fields})


async def scheduler_on(resources: EnvResources, cfg, store: TrajectoryStore,  # type: ignore[no-untyped-def]
                       think_s: float = 0.0) -> Scheduler:
    factories = {t.name: env_factory(t, resources) for t in cfg.tasks}
    instances = {t.name: await resolve_instances(t, factories[t.name]) for t in cfg.tasks}
    assert all(unmet_needs(t, resources) == [] for t in cfg.tasks)
    return Scheduler(cfg, store, ScriptedGateway(terminal_gold, delay_s=think_s), factories, instances)


def terminal_task(**fields: object) -> dict[str, object]:
    return {"name": "term", "env_id": "gymfleet/Terminal-v0", "instances": TERMINAL_TASKS,
            "group_size": 4, "max_turns": 4, **fields}


@pytest.mark.bwrap
async def test_rollouts_lease_warm_sandboxes(bwrap_available: bool, tmp_path: Path,
                                             sqlite_store: TrajectoryStore) -> None:
    cfg = run_config(tmp_path, [terminal_task()], max_in_flight=3)
    async with EnvResources.open(resources_config(tmp_path), run_id="r1") as resources:
        outcome = await (await scheduler_on(resources, cfg, sqlite_store)).run()
        usage = resources.usage()
        rewards = [s.trajectory.reward for s in await sqlite_store.trajectories("r1", limit=None)]
    n_rollouts = len(TERMINAL_TASKS) * 4
    assert outcome.completed == n_rollouts and rewards == [1.0] * n_rollouts
    # One spec for every task here: a sandbox per concurrent rollout at most, all others warm.
    assert usage.sandboxes_started <= cfg.max_in_flight + 1, usage
    assert usage.sandboxes_reused == n_rollouts - usage.sandboxes_started
    assert usage.sandboxes_leased == 0 and usage.sandboxes_idle == usage.sandboxes_started
    assert read_records(tmp_path / "sandboxes") == []  # the pool's idle sandboxes closed with it


@pytest.mark.bwrap
async def test_the_reaper_sweeps_on_its_timer_during_a_run(bwrap_available: bool, tmp_path: Path,
                                                          sqlite_store: TrajectoryStore) -> None:
    cfg = run_config(tmp_path, [terminal_task(group_size=2)], max_in_flight=2)
    config = resources_config(tmp_path, reap_every_s=0.2)
    async with EnvResources.open(config, run_id="r1") as resources:
        # A sandbox left by someone else that expires 0.3 s from now; the run lasts at least
        # 6 rollouts x 2 turns x 0.25 s of think time / 2 in flight = 1.5 s.
        backend = await resources.backend("local")
        stale = backend.create(SandboxSpec(), SandboxLabels(run_id="gone", expires_at=time.time() + 0.3))
        await stale.start()
        run = asyncio.create_task((await scheduler_on(resources, cfg, sqlite_store, think_s=0.25)).run())
        ids = lambda: {r.sandbox_id for r in read_records(tmp_path / "sandboxes")}  # noqa: E731
        deadline = time.monotonic() + 60
        while stale.sandbox_id in ids() and time.monotonic() < deadline and not run.done():
            await asyncio.sleep(0.1)
        reaped_during_run = stale.sandbox_id not in ids() and not run.done()
        outcome = await run
        await stale.close()
    assert reaped_during_run, "the reaper did not sweep the expired sandbox while the run went on"
    assert outcome.completed == len(TERMINAL_TASKS) * 2
    assert {s.trajectory.status for s in await sqlite_store.trajectories("r1", limit=None)} == {RolloutStatus.ok}


def chromium_browsers() -> set[int]:
    """Chromium browser processes (not their renderer, GPU or utility children) under this process.

    Session-scoped fixtures of other test packages (the browser host, the slides renderer) may hold
    their own Chromium under this pytest process; callers compare against a set taken beforehand."""
    me, found = os.getpid(), set()
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        is_chromium = bool(cmdline) and cmdline[0].rsplit(b"/", 1)[-1] in (b"chromium", b"chrome")
        if is_chromium and not any(a.startswith(b"--type=") for a in cmdline) and _descends(pid, me, status):
            found.add(pid)
    return found


def _descends(pid: int, ancestor: int, status: str) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            ppid = int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                            if line.startswith("PPid:")))
        except (OSError, StopIteration):
            return False
        pid = ppid
    return False


@pytest.mark.browser
async def test_one_chromium_serves_concurrent_miniwob_episodes(chromium_path: str) -> None:
    n_episodes = 6
    tasks = ["click-button", "click-link", "enter-text"]
    others = chromium_browsers()  # held by other packages' session fixtures, if any
    ours = lambda: chromium_browsers() - others  # noqa: E731
    async with EnvResources.open(probe=()) as resources:
        envs = [make_agent_env(f"gymfleet/miniwob.{tasks[i % 3]}-v0", resources) for i in range(n_episodes)]
        try:
            firsts = await asyncio.gather(*(env.reset_async(seed=i) for i, env in enumerate(envs)))
            # every episode is running now: one browser process, one fresh context each
            assert len(ours()) == 1
            assert resources.usage().browser_contexts == n_episodes
            assert resources.usage().chromium_hosts == 1

            async def play(env, obs: str) -> float:  # type: ignore[no-untyped-def]
                policy, total = env.gold_policy(), 0.0
                for _ in range(10):
                    obs, reward, terminated, truncated, _ = await env.step_async(await policy.act(obs))
                    total += reward
                    if terminated or truncated:
                        return total
                return total

            rewards = await asyncio.gather(*(play(env, obs) for env, (obs, _) in zip(envs, firsts, strict=True)))
            assert rewards == [1.0] * n_episodes
        finally:
            await asyncio.gather(*(env.close_async() for env in envs))
        assert resources.usage().browser_contexts == 0  # each episode closed its context
        assert len(ours()) == 1  # the host outlives the episodes...
    assert ours() == set()  # ...and closes with the resources
