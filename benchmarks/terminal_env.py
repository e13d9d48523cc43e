"""Terminal env latencies per backend: one agent turn and one whole gold episode; prints JSON.

Baseline in the same run: a raw ``sandbox.exec("true")`` on the same backend, so
``turn_overhead_ratio`` is what the persistent shell (state restore + save around every
command) costs over a bare exec. The episode figure is reset (sandbox start, files,
setup.sh) + the gold turn + submit (hidden tests) + release.

Usage: ``python benchmarks/terminal_env.py [--n 10] [--backends local,docker]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from gymfleet.envs.base import ScriptedPolicy
from gymfleet.envs.episode import run_episode
from gymfleet.envs.sandbox import get_backend
from gymfleet.envs.sandbox.base import SandboxBackend
from gymfleet.envs.terminal import TerminalEnv
from gymfleet.envs.actions import bash_block
from gymfleet.envs.terminal.shell import PersistentShell, scratch_dir

EPISODE_TASKS = ["word-frequency", "git-revert", "sqlite-view"]


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


async def _turns(env: TerminalEnv, n: int) -> dict[str, float]:
    await env.reset_async(options={"instance_id": EPISODE_TASKS[0]})
    episode = env._episode  # noqa: SLF001 - the benchmark times the env's own sandbox
    assert episode is not None
    shell = PersistentShell(episode.sandbox, scratch_dir(episode.sandbox))
    raw, wrapped = [], []
    for _ in range(n):
        t = time.perf_counter()
        await episode.sandbox.exec("true", timeout_s=30)
        raw.append(time.perf_counter() - t)
        t = time.perf_counter()
        await shell.run("cd . && export A=1", timeout_s=30)
        wrapped.append(time.perf_counter() - t)
    await env.close_async()
    return {"raw_exec_ms": _median_ms(raw), "shell_turn_ms": _median_ms(wrapped),
            "turn_overhead_ratio": round(statistics.median(wrapped) / statistics.median(raw), 2)}


async def _episodes(env: TerminalEnv, n: int) -> dict[str, object]:
    times, rewards = [], []
    for i in range(n):
        task_id = EPISODE_TASKS[i % len(EPISODE_TASKS)]
        solution = env.tasks[task_id].solution_script
        t = time.perf_counter()
        policy = ScriptedPolicy([bash_block(solution), "submit"])
        episode = await run_episode(env, policy, instance_id=task_id)
        times.append(time.perf_counter() - t)
        rewards.append(episode.reward)
    await env.close_async()
    return {"gold_episode_ms": _median_ms(times), "gold_mean_reward": sum(rewards) / len(rewards)}


async def _bench(backend: SandboxBackend, n: int) -> dict[str, object]:
    env = TerminalEnv(sandbox=backend, task_ids=EPISODE_TASKS)
    return {**await _turns(env, n), **await _episodes(env, n)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10, help="samples per figure")
    parser.add_argument("--backends", default="local,docker", help="comma-separated backend names")
    args = parser.parse_args()
    out: dict[str, object] = {"benchmark": "terminal_env", "n": args.n}
    for name in args.backends.split(","):
        try:
            backend = get_backend(name)
        except Exception as exc:  # a missing backend is reported, not fatal
            out[name] = {"error": str(exc)}
            continue
        out[name] = asyncio.run(_bench(backend, args.n))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
