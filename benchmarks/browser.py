"""Browser env speed: reset and step latency (p50/p95), and episode throughput by concurrency.

Gold policies play MiniWoB tasks through the full env in real Chromium. Latency comes from one
env playing episodes back to back. Throughput runs C envs at once (one browser context each,
on one shared Chromium unless --browser-per-env), each playing episodes for --seconds; the
baseline is C = 1, and ``saturation_concurrency`` is the smallest C after which throughput rises
by less than 10% (or falls). Prints one JSON object on stdout; progress goes to stderr.

Usage: ``python benchmarks/browser.py [--episodes 30] [--levels 1,2,4,8,16] [--seconds 8]
[--sandbox local|docker] [--browser-per-env]``
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from typing import Annotated

import numpy as np
import typer
from pydantic import BaseModel
from rich.console import Console
from rich.progress import Progress

from gymfleet.envs.browser.baselines import RandomPolicy
from gymfleet.envs.browser.chromium import BrowserHost, open_host
from gymfleet.envs.browser.env import BrowserEnv
from gymfleet.envs.browser.gold import SOLVERS
from gymfleet.envs.browser.miniwob import miniwob_html_dir
from gymfleet.envs.episode import run_episode
from gymfleet.core.errors import EnvError

TASKS = sorted(SOLVERS)
RISE_THRESHOLD = 1.10


class BenchConfig(BaseModel):
    """What to measure."""

    episodes: int = 30
    """Episodes for the latency figures."""
    levels: list[int] = [1, 2, 4, 8, 16]
    """Concurrent envs to try, ascending."""
    seconds: float = 8.0
    """Wall seconds each concurrency level runs."""
    sandbox: str = "local"
    """Where Chromium runs: local or docker."""
    browser_per_env: bool = False
    """Give every env its own Chromium instead of sharing one."""


async def play(env: BrowserEnv, instance: str, resets: list[float], steps: list[float]) -> float:
    """One gold episode; appends its latencies (seconds) and returns its reward."""
    t = time.perf_counter()
    obs, _ = await env.reset_async(options={"instance_id": instance})
    resets.append(time.perf_counter() - t)
    policy, reward = env.gold_policy(), 0.0
    for _ in range(env.config.max_turns):
        action = await policy.act(obs)
        t = time.perf_counter()
        obs, reward, terminated, truncated, _ = await env.step_async(action)
        steps.append(time.perf_counter() - t)
        if terminated or truncated:
            break
    return reward


def pct_ms(samples: list[float]) -> dict[str, float]:
    a = np.array(samples) * 1000
    return {"p50_ms": round(float(np.percentile(a, 50)), 1), "p95_ms": round(float(np.percentile(a, 95)), 1),
            "n": len(samples)}


async def latency(host: BrowserHost, cfg: BenchConfig, progress: Progress) -> dict:
    env = BrowserEnv(host=host, tasks=TASKS)
    resets: list[float] = []
    steps: list[float] = []
    rewards = []
    bar = progress.add_task("latency", total=cfg.episodes)
    try:
        await play(env, f"{TASKS[0]}@0", [], [])  # warm-up: first page of the context
        for i in range(cfg.episodes):
            rewards.append(await play(env, f"{TASKS[i % len(TASKS)]}@{i}", resets, steps))
            progress.advance(bar)
    finally:
        await env.close_async()
    return {"reset": pct_ms(resets), "step": pct_ms(steps), "gold_success_rate": float(np.mean(rewards)),
            "random_success_rate": await random_baseline(host)}


async def random_baseline(host: BrowserHost) -> float:
    """Success rate of RandomPolicy (5 turns) on each gold task once: the floor to beat."""
    env = BrowserEnv(host=host, tasks=TASKS, max_turns=5)
    try:
        rewards = [
            (await run_episode(env, RandomPolicy(seed=i), instance_id=f"{task}@{i}")).reward
            for i, task in enumerate(TASKS)
        ]
    finally:
        await env.close_async()
    return round(float(np.mean(rewards)), 3)


async def throughput(host: BrowserHost | None, n_envs: int, cfg: BenchConfig) -> dict:
    envs = [
        BrowserEnv(host=host, tasks=TASKS, sandbox=cfg.sandbox) for _ in range(n_envs)
    ]
    done: list[float] = []
    errors: list[str] = []
    deadline = 0.0

    async def worker(k: int, env: BrowserEnv) -> None:
        i = 0
        while time.perf_counter() < deadline:
            try:
                done.append(await play(env, f"{TASKS[(k + i) % len(TASKS)]}@{k * 1000 + i}", [], []))
            except EnvError as exc:  # e.g. a page that did not load in time: counted, not fatal
                errors.append(str(exc)[:200])
            i += 1

    try:
        await asyncio.gather(*(env.reset_async(options={"instance_id": TASKS[0]}) for env in envs))
        start = time.perf_counter()
        deadline = start + cfg.seconds
        await asyncio.gather(*(worker(k, env) for k, env in enumerate(envs)))
        elapsed = time.perf_counter() - start
    finally:
        await asyncio.gather(*(env.close_async() for env in envs))
    return {"concurrency": n_envs, "episodes": len(done), "episodes_per_s": round(len(done) / elapsed, 2),
            "success_rate": round(float(np.mean(done)), 3) if done else None,
            "errors": len(errors), "first_error": errors[0] if errors else None}


def saturation(curve: list[dict]) -> int:
    """The smallest concurrency after which throughput rises by less than RISE_THRESHOLD."""
    for prev, nxt in zip(curve, curve[1:], strict=False):
        if nxt["episodes_per_s"] < prev["episodes_per_s"] * RISE_THRESHOLD:
            return prev["concurrency"]
    return curve[-1]["concurrency"]


async def run(cfg: BenchConfig) -> dict:
    console = Console(stderr=True)
    host = open_host(cfg.sandbox, pages_dirs=(miniwob_html_dir(),))
    t = time.perf_counter()
    await host.start()
    start_s = time.perf_counter() - t
    try:
        with Progress(console=console, transient=True) as progress:
            lat = await latency(host, cfg, progress)
            bar = progress.add_task("concurrency", total=len(cfg.levels))
            curve = []
            for level in cfg.levels:
                curve.append(await throughput(None if cfg.browser_per_env else host, level, cfg))
                progress.advance(bar)
    finally:
        await host.close()
    base = curve[0]["episodes_per_s"] or 1e-9
    for point in curve:
        point["speedup_vs_1"] = round(point["episodes_per_s"] / base, 2)
    return {
        "benchmark": "browser",
        "sandbox": cfg.sandbox,
        "shared_browser": not cfg.browser_per_env,
        "browser_start_s": round(start_s, 2),
        "tasks": len(TASKS),
        **lat,
        "throughput": curve,
        "saturation_concurrency": saturation(curve),
        "cpu_count": os.cpu_count(),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
    }


def main(
    episodes: Annotated[int, typer.Option(min=1)] = 30,
    levels: Annotated[str, typer.Option(help="Comma-separated concurrency levels.")] = "1,2,4,8,16",
    seconds: Annotated[float, typer.Option(min=1)] = 8.0,
    sandbox: Annotated[str, typer.Option(help="local or docker.")] = "local",
    browser_per_env: Annotated[bool, typer.Option("--browser-per-env")] = False,
) -> None:
    cfg = BenchConfig(episodes=episodes, levels=[int(x) for x in levels.split(",")], seconds=seconds,
                      sandbox=sandbox, browser_per_env=browser_per_env)
    with contextlib.suppress(KeyboardInterrupt):
        print(json.dumps(asyncio.run(run(cfg)), indent=2))


if __name__ == "__main__":
    typer.run(main)
