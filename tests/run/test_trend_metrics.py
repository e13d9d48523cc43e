"""Metrics that show a trend: a task's reward over the rollouts the newest policy version sampled
(the since-start mean under its own name) and its generated tokens per rollout, in metrics.jsonl,
the progress line and the trackers under the same names; one point per step on every axis; the
warm start's loss per epoch. Real RunStats, MetricsWriter and Tracking; the tracker is a fake
implementing the Tracker Protocol."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gymfleet.core.records import RolloutStatus, Trajectory
from gymfleet.orchestrator.metrics import MetricsWriter
from gymfleet.orchestrator.progress import RunStats, TaskStats
from gymfleet.run.display import progress_line
from gymfleet.run.trackers import HeldOutTable, Scalars
from gymfleet.run.tracking import JsonlTail, Tracking, learner_scalars, rollout_scalars


class RecordingTracker:
    """A Tracker that keeps what it is sent."""

    def __init__(self) -> None:
        self.points: list[Scalars] = []

    def log(self, scalars: Scalars) -> None:
        self.points.append(scalars)

    def log_heldout(self, table: HeldOutTable) -> None:
        pass

    def close(self) -> None:
        pass

    def series(self, tag: str) -> list[tuple[int, float]]:
        return [(p.step, p.values[tag]) for p in self.points if tag in p.values]


def _rollout(reward: float, version: int, n_generated: int, status: RolloutStatus = RolloutStatus.ok) -> Trajectory:
    mask = np.array([0] * 5 + [1] * n_generated, np.uint8)
    versions = np.where(mask == 1, version, -1).astype(np.int32)
    return Trajectory("r", "run", "g", "e", "i", token_ids=np.zeros(len(mask), np.int32), loss_mask=mask,
                      logprobs=np.zeros(len(mask), np.float32),
                      versions=versions, reward=reward, status=status)


def test_reward_is_per_policy_version_and_the_since_start_mean_has_its_own_name() -> None:
    # Before: mean_reward (and the console's "reward") was the mean since the start: flat, no trend.
    stats = RunStats("trend", tasks={"echo": TaskStats("echo")})
    for reward, version, n in [(0.0, 0, 10), (0.0, 0, 10), (1.0, 1, 4), (0.5, 1, 6)]:
        stats.started("echo")
        stats.finished("echo", _rollout(reward, version, n))
    task = stats.snapshot()["tasks"]["echo"]
    assert task["mean_reward"] == pytest.approx(0.75) and task["reward_version"] == 1
    assert task["mean_reward_since_start"] == pytest.approx(0.375)
    assert task["generated_tokens_per_rollout"] == pytest.approx(5.0)
    assert "reward 0.750" in progress_line(stats)


def test_one_point_per_step_on_every_axis_and_the_warm_start_loss(tmp_path: Path) -> None:
    # Before: a periodic metrics line with no rollout completed since repeated its step, and the
    # warm start's loss reached no tracker.
    metrics_path, steps_path = tmp_path / "metrics.jsonl", tmp_path / "learner.jsonl"
    tracker = RecordingTracker()
    tracking = Tracking([tracker], [(JsonlTail(metrics_path), rollout_scalars), (JsonlTail(steps_path), learner_scalars)])
    stats = RunStats("trend", tasks={"echo": TaskStats("echo")})
    with MetricsWriter(metrics_path) as metrics:
        for reward, version in [(0.0, 0), (1.0, 1)]:
            stats.started("echo")
            stats.finished("echo", _rollout(reward, version, 3))
            metrics.write("progress", stats.snapshot())
            metrics.write("progress", stats.snapshot())  # the next tick: nothing completed since
    rows = [{"event": "warm_start", "t": 1.0, "epoch": e, "loss": 2.0 - e} for e in (0, 1, 2)]
    rows += [{"event": "step", "t": 2.0, "step": 1, "loss": 0.5}, {"event": "step", "t": 2.1, "step": 1, "loss": 0.5,
                                                                   "recovered": True},
             {"event": "step", "t": 3.0, "step": 2, "loss": 0.25}]
    steps_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tracking.drain()
    assert tracker.series("tasks/echo/mean_reward") == [(1, 0.0), (2, 1.0)]  # the trend (since start: 0.5)
    assert tracker.series("tasks/echo/mean_reward_since_start") == [(1, 0.0), (2, 0.5)]
    assert tracker.series("tasks/echo/generated_tokens_per_rollout") == [(1, 3.0), (2, 3.0)]
    assert tracker.series("warm_start/loss") == [(0, 2.0), (1, 1.0), (2, 0.0)]
    assert tracker.series("learner/loss") == [(1, 0.5), (2, 0.25)]
    for axis in ("rollouts", "learner", "warm_start"):
        steps = [p.step for p in tracker.points if p.axis == axis]
        assert steps and len(steps) == len(set(steps)), (axis, steps)
