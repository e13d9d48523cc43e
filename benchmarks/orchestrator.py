"""Orchestrator speed at 10,000 concurrent rollouts, and trajectory store insert rates.

Part 1 runs the real Scheduler and a real SQLite TrajectoryStore against an in-process env and
policy gateway whose latencies follow long-tailed distributions (sandbox reset log-normal, model
turns Pareto, env commands log-normal with a heavy tail, grading log-normal, 1 + geometric
turns). It keeps ``--in-flight`` rollouts going for ``--duration-s`` and reports, over the
steady window after ``--warmup-s``:

- ``achieved_concurrency``: time-averaged rollouts in flight (and the peak);
- ``rollouts_per_s`` against ``ideal_rollouts_per_s`` = in_flight / E[rollout latency]
  (Little's law, E[...] by Monte Carlo from the same distributions), and their ``ratio``;
- ``scheduler_overhead_us_per_step``: the scheduler's own CPU time per admission + settlement;
- ``rollout_overhead_ms_per_turn``: wall time a turn took beyond its sampled latencies (event loop
  lag at this concurrency, mostly);
- ``peak_rss_kib_per_in_flight``: (peak RSS - RSS before) / peak in flight.

Part 2 measures store insert rates (rollouts/s and MB/s, each rollout in its own savepoint of a
batched transaction) on SQLite and PostgreSQL (``--pg-url`` or ``GYMFLEET_TEST_PG_URL``), against
a baseline in the same run: one plain multi-row INSERT of the same rows.

Usage: ``python benchmarks/orchestrator.py [--in-flight 10000] [--duration-s 60] [--warmup-s 20]
[--loop both|uvloop|asyncio]`` (both: the asyncio loop is the baseline of the uvloop run).
Prints one JSON object on stdout; progress goes to stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import psutil
import typer
from rich.console import Console
from sqlalchemy import insert

from gymfleet.core.records import Message, SamplingParams, Trajectory
from gymfleet.envs.base import AgentEnv, ConstantPolicy, Policy
from gymfleet.orchestrator.config import RunConfig
from gymfleet.orchestrator.loop import run_loop
from gymfleet.orchestrator.scheduler import Scheduler
from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.orchestrator.store.codec import to_values
from gymfleet.orchestrator.store.engine import normalise_url
from gymfleet.orchestrator.store.schema import TrajectoryRow

err = Console(stderr=True)
VOCAB = 49_152


class Latencies:
    """The latency model (seconds). Each draw uses the rollout's own generator."""

    reset_median_s, reset_sigma = 0.5, 0.5
    turn_scale_s, turn_alpha = 0.4, 2.5  # Lomax: 0.4 * (1 + Pareto(2.5)), mean 0.67 s, long tail
    step_median_s, step_sigma = 0.3, 1.0
    grade_median_s, grade_sigma = 1.0, 0.5
    p_end = 0.35  # each turn ends the episode with this probability
    max_turns = 12

    @classmethod
    def turns(cls, rng: np.random.Generator) -> int:
        return int(min(rng.geometric(cls.p_end), cls.max_turns))

    @classmethod
    def reset(cls, rng: np.random.Generator) -> float:
        return float(rng.lognormal(np.log(cls.reset_median_s), cls.reset_sigma))

    @classmethod
    def turn(cls, rng: np.random.Generator) -> float:
        return float(cls.turn_scale_s * (1 + rng.pareto(cls.turn_alpha)))

    @classmethod
    def step(cls, rng: np.random.Generator) -> float:
        return float(rng.lognormal(np.log(cls.step_median_s), cls.step_sigma))

    @classmethod
    def grade(cls, rng: np.random.Generator) -> float:
        return float(rng.lognormal(np.log(cls.grade_median_s), cls.grade_sigma))

    @classmethod
    def mean_rollout_s(cls, n: int = 200_000, seed: int = 1) -> float:
        """E[rollout latency] by Monte Carlo."""
        rng = np.random.default_rng(seed)
        turns = np.minimum(rng.geometric(cls.p_end, n), cls.max_turns)
        reset = rng.lognormal(np.log(cls.reset_median_s), cls.reset_sigma, n)
        grade = rng.lognormal(np.log(cls.grade_median_s), cls.grade_sigma, n)
        per_turn = cls.turn_scale_s * (1 + rng.pareto(cls.turn_alpha, n)) + rng.lognormal(
            np.log(cls.step_median_s), cls.step_sigma, n)
        return float(np.mean(reset + grade + turns * per_turn))


INSTANCE_IDS = [f"i{i:05d}" for i in range(1000)]
SEEDS = np.random.SeedSequence(0)


class LatencyEnv(AgentEnv):
    """An in-process env: sleeps the sampled latencies, answers ~150-token observations."""

    def __init__(self) -> None:
        super().__init__()
        self.ids = INSTANCE_IDS
        self.rng = np.random.default_rng(SEEDS.spawn(1)[0])
        self.turns_left = 0
        self.sampled_s = 0.0

    @property
    def system_prompt(self) -> str:
        return "Solve the task; one command per turn."

    def instance_ids(self) -> list[str]:
        return self.ids

    async def reset_async(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.turns_left = Latencies.turns(self.rng)
        delay = Latencies.reset(self.rng)
        self.sampled_s += delay
        await asyncio.sleep(delay)
        return "x" * 600, {"instance_id": (options or {}).get("instance_id", self.ids[0])}

    async def step_async(self, action: str):
        self.turns_left -= 1
        delay = Latencies.step(self.rng) + (Latencies.grade(self.rng) if self.turns_left <= 0 else 0.0)
        self.sampled_s += delay
        await asyncio.sleep(delay)
        done = self.turns_left <= 0
        return "y" * 600, float(done and self.rng.random() < 0.5), done, False, {"sampled_env_s": self.sampled_s}

    async def close_async(self) -> None:
        return None

    def gold_policy(self, instance_id: str | None = None) -> Policy:
        return ConstantPolicy("ok")


class LatencySession:
    """A PolicySession: Pareto-tailed turn latency, 64 generated tokens a turn, 150 per observation."""

    def __init__(self, gateway: LatencyGateway, rollout_id: str, messages: list[Message]) -> None:
        self.gateway, self.rollout_id = gateway, rollout_id
        self.rng = np.random.default_rng(SEEDS.spawn(1)[0])
        self.parts: list[tuple[np.ndarray, int]] = [(self._ids(300), 0)]
        self.sampled_s = 0.0

    def _ids(self, n: int) -> np.ndarray:
        return self.rng.integers(0, VOCAB, n, dtype=np.int32)

    async def generate(self, sampling: SamplingParams) -> str:
        delay = Latencies.turn(self.rng)
        self.sampled_s += delay
        self.gateway.n_turns += 1
        await asyncio.sleep(delay)
        self.parts.append((self._ids(64), 1))
        return "ls -la"

    def add_message(self, role: str, content: str) -> None:
        self.parts.append((self._ids(150), 0))

    def to_trajectory(self, run_id: str, group_id: str, env_id: str, instance_id: str) -> Trajectory:
        ids = np.concatenate([p for p, _ in self.parts])
        mask = np.concatenate([np.full(len(p), m, np.uint8) for p, m in self.parts])
        traj = Trajectory(self.rollout_id, run_id, group_id, env_id, instance_id, token_ids=ids, loss_mask=mask,
                          logprobs=np.where(mask == 1, -0.7, 0).astype(np.float32),
                          versions=np.where(mask == 1, 0, -1).astype(np.int32))
        traj.metrics["sampled_policy_s"] = self.sampled_s
        self.gateway.sampled_s.append(self.sampled_s)
        return traj


class LatencyGateway:
    """A PolicyGateway of LatencySessions."""

    def __init__(self) -> None:
        self.n_turns = 0
        self.sampled_s: list[float] = []

    def open_session(self, rollout_id: str, messages: list[Message]) -> LatencySession:
        return LatencySession(self, rollout_id, messages)

    @property
    def policy_version(self) -> int:
        return 0


async def scheduler_bench(in_flight: int, duration_s: float, warmup_s: float, workdir: Path,
                          store_url: str | None = None, run_id: str = "bench") -> dict[str, Any]:
    """Part 1 (see the module docstring); ``store_url`` (default: SQLite in ``workdir``) and
    ``run_id`` let several processes work on one run (benchmarks/shards.py)."""
    cfg = RunConfig.model_validate({
        "run_id": run_id, "store": store_url or str(workdir / "bench.db"),
        "metrics_path": str(workdir / "metrics.jsonl"), "max_in_flight": in_flight, "metrics_interval_s": 5,
        "tasks": [{"name": n, "env_id": f"bench/{n}", "group_size": 8, "passes": None, "weight": w,
                   "max_turns": Latencies.max_turns, "turn_timeout_s": 600, "rollout_timeout_s": 3600}
                  for n, w in (("swe", 1), ("terminal", 2), ("browser", 1))],
    })
    proc = psutil.Process()
    rss_before = proc.memory_info().rss
    async with await TrajectoryStore.open(cfg.store) as store:
        gateway = LatencyGateway()
        envs: list[LatencyEnv] = []

        def make() -> LatencyEnv:
            envs.append(LatencyEnv())
            return envs[-1]

        scheduler = Scheduler(cfg, store, gateway, {t.name: make for t in cfg.tasks},
                              {t.name: LatencyEnv().instance_ids() for t in cfg.tasks})
        runner = asyncio.create_task(scheduler.run())
        samples: list[int] = []
        peak_rss, start = rss_before, time.monotonic()
        window_start_completed, window_start_overhead, window_start_decisions = 0, 0.0, 0
        while (elapsed := time.monotonic() - start) < duration_s:
            await asyncio.sleep(0.25)
            peak_rss = max(peak_rss, proc.memory_info().rss)
            if elapsed >= warmup_s:
                if not samples:
                    window_t0 = time.monotonic()
                    window_start_completed = scheduler.stats.completed
                    window_start_overhead, window_start_decisions = scheduler.overhead_s, scheduler.n_decisions
                samples.append(scheduler.stats.in_flight)
            err.print(f"[dim]{elapsed:5.1f} s  in flight {scheduler.stats.in_flight}  "
                      f"completed {scheduler.stats.completed}[/]", end="\r")
        window_s = time.monotonic() - window_t0
        completed = scheduler.stats.completed - window_start_completed
        overhead_s = scheduler.overhead_s - window_start_overhead
        steps = scheduler.n_decisions - window_start_decisions
        peak_in_flight = scheduler.stats.peak_in_flight
        scheduler.request_stop()
        scheduler.request_stop()  # abort the rest at once
        await runner
        trajs = await store.trajectories(run_id, limit=2000, status=None)
    ok = [s.trajectory for s in trajs if s.trajectory.status.value == "ok"]
    lag = [
        (t.timings["total_s"] - t.metrics["sampled_policy_s"] - t.metrics.get("sampled_env_s", 0.0))
        / max(t.metrics["n_turns"], 1) for t in ok if "sampled_policy_s" in t.metrics
    ]
    mean_latency_s = Latencies.mean_rollout_s()
    ideal = in_flight / mean_latency_s
    rate = completed / window_s
    return {
        "in_flight_cap": in_flight,
        "duration_s": duration_s,
        "steady_window_s": round(window_s, 1),
        "achieved_concurrency": round(float(np.mean(samples)), 1),
        "peak_in_flight": peak_in_flight,
        "mean_rollout_latency_s": round(mean_latency_s, 3),
        "rollouts_per_s": round(rate, 1),
        "ideal_rollouts_per_s": round(ideal, 1),
        "ratio": round(rate / ideal, 3),
        "scheduler_overhead_us_per_step": round(1e6 * overhead_s / max(steps, 1), 1),
        "rollout_overhead_ms_per_turn": round(1e3 * float(np.median(lag)), 2) if lag else None,
        "peak_rss_kib_per_in_flight": round((peak_rss - rss_before) / 1024 / max(peak_in_flight, 1), 1),
        "store_rollouts_written": store.n_written,
    }


def synthetic(n: int, n_tokens: int, run_id: str) -> list[Trajectory]:
    rng = np.random.default_rng(0)
    mask = (rng.random(n_tokens) < 0.3).astype(np.uint8)
    return [
        Trajectory(f"{run_id}/{i}", run_id, f"{run_id}/g{i // 8}", "bench/store", f"i{i // 8}",
                   token_ids=rng.integers(0, VOCAB, n_tokens, dtype=np.int32), loss_mask=mask,
                   logprobs=np.where(mask == 1, -0.5, 0).astype(np.float32),
                   versions=np.where(mask == 1, 3, -1).astype(np.int32),
                   messages=[Message("user", "z" * 2000), Message("assistant", "w" * 1000)],
                   reward=1.0, metrics={"passed": 1}, timings={"total_s": 1.0})
        for i in range(n)
    ]


async def store_bench(url: str, n: int, n_tokens: int, schema: str | None) -> dict[str, Any]:
    async with await TrajectoryStore.open(url, schema=schema) as store:
        await store.start_run("store-bench", {})
        trajs = synthetic(n, n_tokens, "store-bench")
        t0 = time.perf_counter()
        for traj in trajs:
            store.add(traj)
        await store.flush()
        store_s = time.perf_counter() - t0
        assert store.n_failed == 0
        rows = [to_values(t) for t in synthetic(n, n_tokens, "store-bench")]
        for row in rows:
            row["rollout_id"] += "/raw"
        t0 = time.perf_counter()
        async with store.engine.begin() as conn:
            for i in range(0, len(rows), 256):
                await conn.execute(insert(TrajectoryRow.__table__), rows[i:i + 256])
        raw_s = time.perf_counter() - t0
    n_bytes = sum(len(v) for r in rows for k, v in r.items() if isinstance(v, bytes))
    return {
        "rollouts": n, "tokens_per_rollout": n_tokens,
        "rollouts_per_s": round(n / store_s, 1),
        "array_mb_per_s": round(n_bytes / store_s / 1e6, 2),
        "baseline_plain_insert_rollouts_per_s": round(n / raw_s, 1),
        "ratio_to_baseline": round(raw_s / store_s, 3),
    }


async def drop_schema(url: str, schema: str) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(normalise_url(url))
    async with engine.begin() as conn:
        await conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    await engine.dispose()


def main(
    in_flight: Annotated[int, typer.Option(help="Rollouts kept in flight.")] = 10_000,
    duration_s: Annotated[float, typer.Option(help="Seconds of the scheduler run.")] = 60.0,
    warmup_s: Annotated[float, typer.Option(help="Seconds before the steady window starts.")] = 20.0,
    store_rollouts: Annotated[int, typer.Option(help="Rollouts inserted per store backend.")] = 2000,
    tokens: Annotated[int, typer.Option(help="Tokens per rollout in the store benchmark.")] = 2048,
    pg_url: Annotated[str | None, typer.Option(help="PostgreSQL URL (default $GYMFLEET_TEST_PG_URL).")] = None,
    loop: Annotated[str, typer.Option(help="Event loop: uvloop, asyncio, or both (asyncio as the baseline).")] = "both",
) -> None:
    """Prints one JSON object with the scheduler and store figures."""
    pg_url = pg_url or os.environ.get("GYMFLEET_TEST_PG_URL")

    async def run(kind: str) -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as tmp:
            err.print(f"scheduler: {in_flight} in flight for {duration_s:g} s on {kind}")
            result: dict[str, Any] = {"loop": kind,
                                      "scheduler": await scheduler_bench(in_flight, duration_s, warmup_s, Path(tmp))}
            err.print("\nstore: sqlite")
            result["store_sqlite"] = await store_bench(str(Path(tmp) / "store.db"), store_rollouts, tokens, None)
        if pg_url:
            err.print("store: postgresql")
            schema = f"bench_{uuid.uuid4().hex[:10]}"
            try:
                result["store_postgresql"] = await store_bench(pg_url, store_rollouts, tokens, schema)
            finally:
                await drop_schema(pg_url, schema)
        else:
            result["store_postgresql"] = {"skipped": "set GYMFLEET_TEST_PG_URL or pass --pg-url"}
        result["cpu_count"] = os.cpu_count()
        result["load_average_1m"] = round(os.getloadavg()[0], 1)
        return result

    if loop != "both":
        print(json.dumps(run_loop(run(loop), loop), indent=2))
        return
    # Each loop in a fresh process, so that RSS per rollout is not read off the previous run's peak.
    results = {}
    for kind in ("asyncio", "uvloop"):
        args = [sys.executable, __file__, "--loop", kind, "--in-flight", str(in_flight), "--duration-s",
                str(duration_s), "--warmup-s", str(warmup_s), "--store-rollouts", str(store_rollouts),
                "--tokens", str(tokens), *(["--pg-url", pg_url] if pg_url else [])]
        results[kind] = json.loads(subprocess.run(args, check=True, stdout=subprocess.PIPE, text=True).stdout)
    base, fast = results["asyncio"]["scheduler"], results["uvloop"]["scheduler"]
    print(json.dumps({**results, "uvloop_vs_asyncio_rollouts_per_s": round(
        fast["rollouts_per_s"] / base["rollouts_per_s"], 3)}, indent=2))


if __name__ == "__main__":
    typer.run(main)
