"""Real rollouts at scale: terminal tasks on local (bubblewrap) sandboxes, and MiniWoB in Chromium.

The real Scheduler, Rollout, envs and SQLite store run with a scripted policy: each turn the
policy "thinks" for a sampled time (log-normal, mean ``--think-s``) and answers the env's gold
action, so every rollout earns 1 and the work is the envs'. For each ``--concurrency`` C the run
keeps C rollouts in flight (tasks repeat forever) for ``--duration-s``, and reports over the
steady window after ``--warmup-s``:

- ``achieved_concurrency`` (time-averaged in flight) and ``rollouts_per_s``, against the
  Little's-law ideal ``C / (E[think per rollout] + W_env)``, W_env being the env's own time per
  rollout (reset, steps, grading, close) measured first at concurrency 1 (``calibration``);
- ``sandbox_acquire_s`` p50/p95 inside rollouts (the warm pool's lease), ``sandbox_cold_starts``,
  ``reset_s`` and ``env_s`` p50/p95 under load;
- peak RSS (this process and all its descendants) and processes, per rollout in flight;
- the machine's load average before and after, and this process's CPU use; on ``--backend docker``
  also the CPU outside this process tree, the containers' and the Docker daemons'
  (``docker_cpu_s_per_rollout``, helper ``docker_cpu.py``).

Before/after: the same script runs on a checkout of d52b72a (before EnvResources), where each
rollout makes its env and backend and starts its own sandbox and Chromium (detected: no
``gymfleet.envs.resources``); ``--per-rollout-env`` emulates that here (private resources per env).

Usage: ``python benchmarks/real_rollouts.py [--concurrency 100,1000] [--think-s 40]
[--duration-s 420] [--warmup-s 180] [--miniwob 16,64]``. Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

import gymfleet
import cpu_stages
import docker_cpu
from gymfleet.orchestrator.config import RunConfig
from gymfleet.orchestrator.envfactory import env_factory, resolve_instances
from gymfleet.core.records import Message, SamplingParams, Trajectory
from gymfleet.orchestrator.scheduler import Scheduler
from gymfleet.orchestrator.store import TrajectoryStore

try:  # the code after this change; absent on the baseline checkout
    from gymfleet.envs.resources import EnvResources, ResourcesConfig
    from gymfleet.envs.sandbox.pool import PoolConfig
except ImportError:
    EnvResources = None  # type: ignore[assignment,misc]

TERMINAL_TASKS = ["log-errors", "word-frequency", "organize-files"]
EASY_TASKS = ["write-word-apple", "copy-file-apple", "rename-file-apple", "append-line-apple"]
TERMINAL_ENVS = {"builtin": ("gymfleet/Terminal-v0", TERMINAL_TASKS), "easy": ("gymfleet/TerminalEasy-v0", EASY_TASKS)}
MINIWOB_TASKS = ["click-button", "click-link", "enter-text", "focus-text", "click-checkboxes"]
SIGMA = 0.5  # log-normal think time: sigma of the log
MIN_FREE_BYTES = 3 << 30


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class GoldSession:
    """A PolicySession answering the gold action after a sampled think time."""

    def __init__(self, gateway: GoldGateway, rollout_id: str, messages: list[Message]) -> None:
        self.gateway, self.rollout_id, self.messages = gateway, rollout_id, list(messages)
        self.instance_id = rollout_id.split("/")[3]  # run/task/pass/instance/sample
        self.policy = gateway.gold(self.instance_id)
        self.think_s = 0.0

    async def generate(self, sampling: SamplingParams) -> str:
        g = self.gateway
        if g.think_s > 0:
            delay = float(g.rng.lognormal(math.log(g.think_s) - SIGMA**2 / 2, SIGMA))
            self.think_s += delay
            await asyncio.sleep(delay)
        action = await self.policy.act(self.messages[-1].content)
        self.messages.append(Message("assistant", action))
        return action

    def add_message(self, role: str, content: str) -> None:
        self.messages.append(Message(role, content))

    def to_trajectory(self, run_id: str, group_id: str, env_id: str, instance_id: str) -> Trajectory:
        traj = Trajectory(self.rollout_id, run_id, group_id, env_id, instance_id, messages=list(self.messages))
        traj.metrics["think_s"] = self.think_s
        return traj


class GoldGateway:
    """A PolicyGateway of GoldSessions; ``gold(instance_id)`` makes the instance's gold policy."""

    def __init__(self, gold: Any, think_s: float, seed: int = 0) -> None:
        self.gold, self.think_s, self.rng = gold, think_s, np.random.default_rng(seed)

    def open_session(self, rollout_id: str, messages: list[Message]) -> GoldSession:
        return GoldSession(self, rollout_id, messages)

    @property
    def policy_version(self) -> int:
        return 0


@functools.cache
def _terminal_actions(instance_id: str) -> tuple[str, ...]:
    from gymfleet.envs.actions import bash_block
    from gymfleet.envs.terminal.easy import EASY_TASKS_DIR
    from gymfleet.envs.terminal.task import BUILTIN_TASKS_DIR, load_tasks

    folder = EASY_TASKS_DIR if (EASY_TASKS_DIR / instance_id).is_dir() else BUILTIN_TASKS_DIR
    task = load_tasks(folder, [instance_id])[instance_id]
    return (bash_block(task.solution_script), "submit")


def terminal_gold(instance_id: str) -> Any:
    from gymfleet.envs.base import ScriptedPolicy

    return ScriptedPolicy(_terminal_actions(instance_id))


def miniwob_gold(instance_id: str) -> Any:
    from gymfleet.envs.browser.gold import gold_policy_for

    return gold_policy_for(instance_id)


class Tree:
    """This process and its descendants: processes, RSS and PSS, sampled (peaks kept).

    RSS summed over processes counts each shared page (Chromium's binary, its shared memory)
    once per process that maps it; PSS (``/proc/<pid>/smaps_rollup``) splits each shared page
    between its processes, so the PSS sum is the memory the tree really holds."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.peak_procs, self.peak_rss, self.peak_pss, self.peak_chromium = 0, 0, 0, 0
        self.peak_by_kind: dict[str, dict[str, float]] = {}

    def cpu_s(self) -> float:
        """CPU seconds used by this process and every descendant so far: live ones' own and
        their reaped children's, and this process's reaped children's."""
        total = sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
                    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        for p in self.me.children(recursive=True):
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return total

    def sample(self) -> None:
        procs = [self.me, *self.me.children(recursive=True)]
        rss, pss, chromium = 0, 0, 0
        kinds: dict[str, list[float]] = {}
        for p in procs:
            try:
                mem = p.memory_full_info()
                cmd = p.cmdline()
            except psutil.Error:
                continue
            rss, pss = rss + mem.rss, pss + mem.pss
            kind = _process_kind(cmd)
            chromium += kind == "chromium-browser"
            row = kinds.setdefault(kind, [0, 0.0, 0.0])
            row[0] += 1
            row[1] += mem.rss / 2**20
            row[2] += mem.pss / 2**20
        self.peak_procs = max(self.peak_procs, len(procs) - 1)
        self.peak_chromium = max(self.peak_chromium, chromium)
        self.peak_pss = max(self.peak_pss, pss)
        if rss > self.peak_rss:
            self.peak_rss = rss
            self.peak_by_kind = {k: {"processes": v[0], "rss_mib": round(v[1], 1), "pss_mib": round(v[2], 1)}
                                 for k, v in sorted(kinds.items())}


def _process_kind(cmd: list[str]) -> str:
    """``python`` (this process), ``chromium-browser``, ``chromium-<type>`` (renderer, gpu-process,
    utility, zygote) or the program's name."""
    if not cmd:
        return "other"
    if cmd[0].endswith(("chromium", "chrome")):
        kind = next((a.split("=", 1)[1] for a in cmd if a.startswith("--type=")), "browser")
        return f"chromium-{kind}"
    return Path(cmd[0]).name


class Timings:
    """Sandbox starts and (after the change) leases, timed by wrapping them."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.leases: list[float] = []
        from gymfleet.envs.sandbox.local_sandbox import LocalSandbox

        original = LocalSandbox.start

        async def timed_start(sandbox: Any) -> None:
            t0 = time.monotonic()
            await original(sandbox)
            self.starts.append(time.monotonic() - t0)

        LocalSandbox.start = timed_start  # type: ignore[method-assign]
        if EnvResources is not None:
            lease = EnvResources.lease

            async def timed_lease(resources: Any, *args: Any, **kwargs: Any) -> Any:
                t0 = time.monotonic()
                got = await lease(resources, *args, **kwargs)
                self.leases.append(time.monotonic() - t0)
                return got

            EnvResources.lease = timed_lease  # type: ignore[method-assign]


def pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 4) if values else None


def task_entry(env_id: str, instances: list[str], env_kwargs: dict[str, Any], passes: int | None,
               group_size: int) -> dict[str, Any]:
    return {"name": "t", "env_id": env_id, "env_kwargs": env_kwargs, "instances": instances,
            "group_size": group_size, "passes": passes, "max_turns": 12, "turn_timeout_s": 3600,
            "rollout_timeout_s": 7200}


async def run_phase(kind: str, concurrency: int, think_s: float, duration_s: float, warmup_s: float,
                    shared: bool, passes: int | None, workdir: Path, timings: Timings,
                    args: argparse.Namespace) -> dict[str, Any]:
    """One scheduler run; returns its figures (``passes`` None: until ``duration_s``)."""
    if kind == "terminal":
        env_id, instances = TERMINAL_ENVS[args.terminal_env]
        entry = task_entry(env_id, instances, {"sandbox": args.backend}, passes, 4)
        gold = terminal_gold
    else:
        entry = task_entry("gymfleet/Browser-v0", MINIWOB_TASKS, {"tasks": MINIWOB_TASKS}, passes, 4)
        gold = miniwob_gold
    tag = f"{kind}-{concurrency}-{int(time.time() * 1000) % 10**8}"
    cfg = RunConfig.model_validate({
        "run_id": tag, "store": str(workdir / f"{tag}.db"), "metrics_path": str(workdir / f"{tag}.jsonl"),
        "max_in_flight": concurrency, "metrics_interval_s": 5, "tasks": [entry]})
    task = cfg.tasks[0]
    resources_cm = (EnvResources.open(ResourcesConfig(sandbox=args.backend, pool=PoolConfig(
        max_idle_per_key=concurrency + 64)), run_id=tag) if shared and EnvResources else None)
    resources = await resources_cm.__aenter__() if resources_cm else None
    n_starts0, n_leases0 = len(timings.starts), len(timings.leases)
    try:
        make = env_factory(task, resources) if resources is not None else env_factory(task)
        instances = {task.name: await resolve_instances(task, make)}
        async with await TrajectoryStore.open(cfg.store) as store:
            scheduler = Scheduler(cfg, store, GoldGateway(gold, think_s), {task.name: make}, instances)
            figures = await drive(scheduler, concurrency, duration_s, warmup_s, passes is None, timings, args)
            trajs = [t.trajectory for t in await store.trajectories(cfg.run_id, limit=None)]
    finally:
        if resources_cm is not None:
            usage = resources.usage()
            await resources_cm.__aexit__(None, None, None)
    done = [t for t in trajs if t.status.value == "ok"]
    env_s = [t.timings["total_s"] - t.timings["generation_s"] for t in done]
    figures.update(
        n_ok=len(done), n_other=len(trajs) - len(done), mean_reward=round(float(np.mean([t.reward for t in done])), 4)
        if done else None,
        mean_think_s=round(float(np.mean([t.metrics.get("think_s", 0.0) for t in done])), 4) if done else None,
        env_s_p50=pct(env_s, 50), env_s_p95=pct(env_s, 95), env_s_mean=round(float(np.mean(env_s)), 4) if env_s else None,
        reset_s_p50=pct([t.timings["reset_s"] for t in done], 50),
        reset_s_p95=pct([t.timings["reset_s"] for t in done], 95),
        total_s_mean=round(float(np.mean([t.timings["total_s"] for t in done])), 4) if done else None,
        sandbox_cold_starts=len(timings.starts) - n_starts0,
        sandbox_start_s_p50=pct(timings.starts[n_starts0:], 50), sandbox_start_s_p95=pct(timings.starts[n_starts0:], 95),
        sandbox_acquire_s_p50=pct(timings.leases[n_leases0:], 50) if EnvResources and shared else None,
        sandbox_acquire_s_p95=pct(timings.leases[n_leases0:], 95) if EnvResources and shared else None,
        statuses=sorted({t.status.value for t in trajs}), reasons=sorted({t.reason[:120] for t in trajs if t.reason})[:5],
    )
    if resources_cm is not None:
        figures["resources_usage"] = usage.__dict__
    return figures


async def drive(scheduler: Scheduler, concurrency: int, duration_s: float, warmup_s: float,
                forever: bool, timings: Timings, args: argparse.Namespace) -> dict[str, Any]:
    tree, started, load0 = Tree(), time.monotonic(), os.getloadavg()
    runner = asyncio.create_task(scheduler.run())
    samples: list[int] = []
    full_at: float | None = None
    cpu0, tree_cpu0, leases0 = resource.getrusage(resource.RUSAGE_SELF), tree.cpu_s(), len(timings.leases)
    done0 = t0 = None
    stopped_early = False
    next_tree = 0.0
    stages0: dict[str, Any] | None = None
    docker0: docker_cpu.Snapshot | None = None
    profile: cpu_stages.Profile | None = None
    while not runner.done():
        await asyncio.sleep(0.25)
        elapsed = time.monotonic() - started
        in_flight = scheduler.stats.in_flight
        if full_at is None and in_flight >= 0.98 * concurrency:
            full_at = elapsed
        if elapsed >= next_tree:  # /proc walks of thousands of processes: off the event loop
            await asyncio.to_thread(tree.sample)
            next_tree = elapsed + min(10.0, max(duration_s, 30.0) / 6)
            log(f"  {elapsed:6.1f} s in flight {in_flight} completed {scheduler.stats.completed} "
                f"procs {tree.peak_procs} rss {tree.peak_rss / 2**30:.2f} GiB")
        if forever and elapsed >= warmup_s:
            if t0 is None:
                t0, done0 = time.monotonic(), scheduler.stats.completed
                cpu0, tree_cpu0 = resource.getrusage(resource.RUSAGE_SELF), await asyncio.to_thread(tree.cpu_s)
                leases0 = len(timings.leases)
                stages0 = args.meter.snapshot() if args.meter else None
                docker0 = args.docker_meter.read() if args.docker_meter else None
                if args.cprofile:
                    profile = cpu_stages.Profile().__enter__()
            samples.append(in_flight)
        if forever and elapsed >= duration_s:
            break
        if psutil.virtual_memory().available < MIN_FREE_BYTES:  # a shared machine: leave it room
            log(f"  stopping early: less than {MIN_FREE_BYTES >> 30} GiB of memory left")
            stopped_early = True
            break
    window_s = time.monotonic() - (t0 if t0 is not None else started)
    completed = scheduler.stats.completed - (done0 or 0)
    if profile is not None:
        profile.__exit__()
    stages1 = args.meter.snapshot() if args.meter and stages0 else None
    cpu1, tree_cpu = resource.getrusage(resource.RUSAGE_SELF), await asyncio.to_thread(tree.cpu_s) - tree_cpu0
    docker1 = args.docker_meter.read() if docker0 is not None else None
    window_leases = timings.leases[leases0:]
    await asyncio.to_thread(tree.sample)  # at full concurrency, before the stop drains it
    load1 = os.getloadavg()
    scheduler.request_stop()
    scheduler.request_stop()
    await runner
    extra: dict[str, Any] = {}
    if stages1 is not None:
        extra["stages"] = cpu_stages.per_rollout(stages0, stages1, tree_cpu, completed)
    if docker0 is not None and docker1 is not None:
        extra |= docker_cpu.per_rollout(docker0, docker1, tree_cpu, completed)
        extra["docker_cpu_note"] = docker_cpu.NOTE
    if profile is not None:
        extra["event_loop_profile_tottime"] = profile.top(30)
        extra["event_loop_profile_file"] = profile.dump(Path(tempfile.gettempdir()) / f"gymfleet-profile-{concurrency}.pstats")
    return extra | {
        "load_avg_start": load0, "load_avg_end": load1,
        "concurrency": concurrency, "window_s": round(window_s, 1), "completed_in_window": completed,
        "stopped_early_low_memory": stopped_early,
        "rollouts_per_s": round(completed / window_s, 4) if window_s else None,
        "achieved_concurrency": round(float(np.mean(samples)), 1) if samples else None,
        "seconds_to_full_concurrency": round(full_at, 1) if full_at is not None else None,
        "orchestrator_cpu_cores": round((cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / window_s, 3),
        "all_cpu_cores": round(tree_cpu / window_s, 3),
        "cpu_s_per_rollout": round(tree_cpu / completed, 4) if completed else None,
        "window_sandbox_acquire_s_p50": pct(window_leases, 50),
        "window_sandbox_acquire_s_p95": pct(window_leases, 95),
        "peak_processes_per_rollout": round(tree.peak_procs / concurrency, 2),
        "peak_rss_mib_per_rollout": round(tree.peak_rss / 2**20 / concurrency, 2),
        "peak_pss_mib_per_rollout": round(tree.peak_pss / 2**20 / concurrency, 2),
        "peak_memory_by_process_kind": tree.peak_by_kind,
        "rollouts_per_cpu_s": round(completed / tree_cpu, 3) if tree_cpu else None,
        "peak_chromium_processes": tree.peak_chromium,
        "self_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


async def bench(kind: str, concurrencies: list[int], args: argparse.Namespace, shared: bool,
                timings: Timings) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"gymfleet-bench-{kind}-"))
    log(f"{kind}: calibration at concurrency 1, no think time")
    calibration = await run_phase(kind, 1, 0.0, 0, 0, shared, 1, workdir, timings, args)
    w_env = calibration["env_s_mean"]
    results: dict[str, Any] = {"calibration": calibration}
    for c in concurrencies:
        log(f"{kind}: concurrency {c}, think {args.think_s} s/turn, {args.duration_s} s ({args.warmup_s} s warm-up)")
        fig = await run_phase(kind, c, args.think_s, args.duration_s, args.warmup_s, shared, None, workdir, timings,
                              args)
        if fig["mean_think_s"] is not None and w_env is not None:
            ideal = c / (fig["mean_think_s"] + w_env)
            fig["ideal_rollouts_per_s"] = round(ideal, 4)
            fig["ratio_to_ideal"] = round(fig["rollouts_per_s"] / ideal, 3)
        results[str(c)] = fig
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="100,1000")
    parser.add_argument("--think-s", type=float, default=40.0)
    parser.add_argument("--duration-s", type=float, default=420.0)
    parser.add_argument("--warmup-s", type=float, default=180.0)
    parser.add_argument("--miniwob", default="16", help="MiniWoB concurrencies ('' to skip)")
    parser.add_argument("--miniwob-think-s", type=float, default=2.0)
    parser.add_argument("--skip-terminal", action="store_true")
    parser.add_argument("--terminal-env", choices=sorted(TERMINAL_ENVS), default="builtin",
                        help="builtin: Terminal-v0's log-errors, word-frequency, organize-files; easy: TerminalEasy-v0")
    parser.add_argument("--backend", choices=["local", "docker"], default="local",
                        help="terminal sandboxes: local (bubblewrap) or docker; on docker cpu_s_per_rollout and "
                             "--stages count this process tree only, docker_cpu_s_per_rollout adds the containers' "
                             "cgroups and the daemons (benchmarks/docker_cpu.py)")
    parser.add_argument("--stages", action="store_true",
                        help="CPU-s per rollout by stage (orchestrator threads, sandbox start/setup/exec/grading/reset)")
    parser.add_argument("--cprofile", action="store_true", help="cProfile the event loop over each steady window")
    parser.add_argument("--per-rollout-env", action="store_true",
                        help="each rollout opens private resources (emulates the old per-rollout env creation)")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(gymfleet.__file__).parent).stdout.strip()  # the code measured
    shared = EnvResources is not None and not args.per_rollout_env
    out: dict[str, Any] = {
        "code": rev, "env_resources": EnvResources is not None, "shared_resources": shared,
        "cpus": os.cpu_count(), "load_before": os.getloadavg(), "think_s": args.think_s,
        "think_distribution": f"log-normal, sigma {SIGMA}", "terminal_env": TERMINAL_ENVS[args.terminal_env],
    }
    timings = Timings()
    args.meter = cpu_stages.StageMeter() if args.stages else None
    docker_terminal = args.backend == "docker" and not args.skip_terminal
    args.docker_meter = docker_cpu.DockerCpuMeter() if docker_terminal else None
    if not args.skip_terminal:
        out[f"terminal_{args.backend}"] = asyncio.run(bench(
            "terminal", [int(c) for c in args.concurrency.split(",") if c], args, shared, timings))
    if args.miniwob:
        mw = argparse.Namespace(**{**vars(args), "think_s": args.miniwob_think_s, "docker_meter": None,
                                   "duration_s": args.duration_s / 3, "warmup_s": args.warmup_s / 3})
        out["miniwob"] = asyncio.run(bench("miniwob", [int(c) for c in args.miniwob.split(",") if c], mw,
                                           shared, timings))
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
