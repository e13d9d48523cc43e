"""Live run statistics: counters per task, a rich table for people, snapshots for the metrics file."""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gymfleet.core.records import RolloutStatus, Trajectory

THROUGHPUT_WINDOW_S = 60.0
FAILURES = (RolloutStatus.policy_error, RolloutStatus.env_error, RolloutStatus.infra_error)


@dataclass
class TaskStats:
    """Counters of one task."""

    name: str
    weight: float = 0.0
    in_flight: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    reward_sum: float = 0.0
    n_rewarded: int = 0
    recent: deque[float] = field(default_factory=deque)
    """Completion times (monotonic seconds) within the throughput window."""
    quarantined: str | None = None
    last_failure: str = ""
    by_version: dict[int, list[float]] = field(default_factory=dict)
    """Per behaviour policy version (the newest that sampled a rollout's tokens): reward sum,
    rewarded rollouts, generated tokens of the task's ok and truncated rollouts."""

    def window(self) -> tuple[int, float | None, float | None]:
        """The newest policy version that sampled rewarded rollouts of this task, their mean reward
        and mean generated tokens (the reward per learner step: a trend, where the since-start
        mean hides one); ``(0, None, None)`` before any."""
        if not self.by_version:
            return 0, None, None
        version = max(self.by_version)
        total, n, tokens = self.by_version[version]
        return version, total / n, tokens / n

    @property
    def completed(self) -> int:
        return sum(self.by_status.values())

    def throughput_per_s(self, now: float) -> float:
        """Completed rollouts per second over the last minute (or since the first completion)."""
        while self.recent and self.recent[0] < now - THROUGHPUT_WINDOW_S:
            self.recent.popleft()
        if not self.recent:
            return 0.0
        return len(self.recent) / max(min(THROUGHPUT_WINDOW_S, now - self.recent[0]), 1.0)


@dataclass
class RunStats:
    """Counters of a whole run, updated by the scheduler as rollouts start and end."""

    run_id: str
    tasks: dict[str, TaskStats] = field(default_factory=dict)
    started_at: float = field(default_factory=time.monotonic)
    in_flight: int = 0
    peak_in_flight: int = 0
    paused: str = ""
    """Why admission is paused (staleness, shutdown), empty when it is not."""
    policy_version: int = 0

    def started(self, task: str) -> None:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self.tasks[task].in_flight += 1

    def finished(self, task: str, traj: Trajectory) -> None:
        stats = self.tasks[task]
        self.in_flight -= 1
        stats.in_flight -= 1
        stats.by_status[traj.status.value] += 1
        stats.recent.append(time.monotonic())
        if traj.status in (RolloutStatus.ok, RolloutStatus.truncated):
            stats.reward_sum += traj.reward
            stats.n_rewarded += 1
            version = int(traj.versions.max()) if len(traj.versions) else 0
            window = stats.by_version.setdefault(max(version, 0), [0.0, 0, 0])
            window[0] += traj.reward
            window[1] += 1
            window[2] += int(traj.loss_mask.sum())
        if traj.status in FAILURES:
            stats.last_failure = traj.reason

    @property
    def completed(self) -> int:
        return sum(t.completed for t in self.tasks.values())

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready snapshot (one line of the metrics file)."""
        now = time.monotonic()
        return {
            "time": time.time(),
            "run_id": self.run_id,
            "elapsed_s": round(now - self.started_at, 3),
            "in_flight": self.in_flight,
            "completed": self.completed,
            "paused": self.paused,
            "policy_version": self.policy_version,
            "tasks": {
                name: {
                    "weight": t.weight,
                    "in_flight": t.in_flight,
                    "completed": t.completed,
                    "by_status": dict(t.by_status),
                    "throughput_per_s": round(t.throughput_per_s(now), 4),
                    **_reward_fields(t),
                    "quarantined": t.quarantined,
                }
                for name, t in self.tasks.items()
            },
        }

    def window_reward(self) -> float | None:
        """The mean reward over every task's newest-version window (:meth:`TaskStats.window`)."""
        total, n = 0.0, 0
        for t in self.tasks.values():
            if t.by_version:
                reward_sum, count, _ = t.by_version[max(t.by_version)]
                total, n = total + reward_sum, n + int(count)
        return total / n if n else None

    def __rich__(self) -> Group:
        now = time.monotonic()
        table = Table(title=f"run {self.run_id}", title_justify="left")
        for col in ("task", "weight", "in flight", "completed", "per min", "reward (newest v)", "failures", "last failure"):
            table.add_column(col, justify="left" if col in ("task", "last failure") else "right")
        for t in self.tasks.values():
            failures = sum(t.by_status[s.value] for s in FAILURES)
            name = f"{t.name} [red](quarantined)[/]" if t.quarantined else t.name
            _, window_reward, _ = t.window()
            reward = f"{window_reward:.3f}" if window_reward is not None else "-"
            table.add_row(name, f"{t.weight:g}", str(t.in_flight), str(t.completed),
                          f"{60 * t.throughput_per_s(now):.1f}", reward, str(failures),
                          Text(t.last_failure[:60], style="dim"))
        head = Text(f"in flight {self.in_flight} · completed {self.completed} · policy v{self.policy_version}"
                    f" · {now - self.started_at:.0f} s")
        if self.paused:
            head.append(f" · paused: {self.paused}", style="yellow")
        return Group(head, table)


def _reward_fields(t: TaskStats) -> dict[str, Any]:
    """A task's reward in a metrics line: ``mean_reward`` over the rollouts the newest policy
    version sampled (``reward_version``; one value per learner step, a trend), the since-start
    mean under its own name, and the window's mean generated tokens per rollout."""
    version, reward, tokens = t.window()
    return {"mean_reward": reward, "reward_version": version,
            "mean_reward_since_start": t.reward_sum / t.n_rewarded if t.n_rewarded else None,
            "generated_tokens_per_rollout": tokens}
