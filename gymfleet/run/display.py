"""The progress of a run for people: a rich live table on a terminal, plain lines when piped.

When stderr is not a terminal (CI, ``nohup``, a log file) a live table prints nothing useful,
so a line like::

    [train-default 02:30] rollouts 48 done (ok=40 truncated=8) · in flight 4 · reward 0.312 · policy v3 · learner step 5

is printed every ``interval_s`` seconds instead (and once at the end). ``train --cluster`` prints
the same line, read from the store (:func:`summary_line`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.live import Live

from gymfleet.orchestrator import RunStats, RunSummary

PLAIN_INTERVAL_S = 10.0
"""Seconds between plain progress lines (at most 30 s apart, as promised in the README)."""


def progress_line(stats: RunStats, extra: str = "") -> str:
    """One plain line of a run's progress (rollouts done, reward, in flight, policy version); the
    reward is that of the rollouts the newest policy version sampled (:meth:`RunStats.window_reward`),
    so it moves as the policy learns."""
    by_status = Counter[str]()
    for task in stats.tasks.values():
        by_status.update(task.by_status)
    return _line(stats.run_id, time.monotonic() - stats.started_at, stats.completed, by_status,
                 stats.window_reward(), stats.in_flight, stats.policy_version, stats.paused, extra)


def summary_line(summary: RunSummary, elapsed_s: float, policy_version: int, extra: str = "") -> str:
    """The same line from the store (``train --cluster``: the shards' counters live in their Ray
    actors; what they stored is what the driver sees). Rewards are over ok and truncated
    rollouts, as on one machine."""
    by_status = Counter[str](summary.by_status)
    rewarded = [(t.mean_reward_ok, t.by_status.get("ok", 0) + t.by_status.get("truncated", 0))
                for t in summary.tasks if t.mean_reward_ok is not None]
    n_rewarded = sum(n for _, n in rewarded)
    reward = sum(r * n for r, n in rewarded) / n_rewarded if n_rewarded else None
    return _line(summary.run_id, elapsed_s, summary.n_trajectories, by_status, reward, summary.n_running,
                 policy_version, "", extra)


def _line(run_id: str, elapsed_s: float, completed: int, by_status: Counter[str], reward: float | None,
          in_flight: int, policy_version: int, paused: str, extra: str) -> str:
    elapsed = int(elapsed_s)
    statuses = " ".join(f"{k}={v}" for k, v in sorted(by_status.items()))
    line = (f"[{run_id} {elapsed // 60:02d}:{elapsed % 60:02d}] rollouts {completed} done"
            f"{f' ({statuses})' if statuses else ''} · in flight {in_flight} · reward "
            f"{'-' if reward is None else f'{reward:.3f}'} · policy v{policy_version}")
    if paused:
        line += f" · paused: {paused}"
    return f"{line} · {extra}" if extra else line


class Progress:
    """A context manager showing ``stats`` while a run's body runs (use inside the event loop).

    Args:
        stats: the scheduler's live counters.
        console: where it goes.
        live: True: rich live table; False: plain lines; None: live when ``console`` is a terminal.
        extra: called for text appended to each plain line (e.g. the learner's step).
        interval_s: seconds between plain lines.
    """

    def __init__(self, stats: RunStats, console: Console, *, live: bool | None = None,
                 extra: Callable[[], str] | None = None, interval_s: float | None = None) -> None:
        self.stats = stats
        self.console = console
        self.live = console.is_terminal if live is None else live
        self.extra = extra or (lambda: "")
        self.interval_s = interval_s or PLAIN_INTERVAL_S
        self._display: Live | None = None
        self._ticker: asyncio.Task[None] | None = None

    def print_line(self) -> None:
        """Prints one plain progress line now."""
        self.console.print(progress_line(self.stats, self.extra()), markup=False, highlight=False, soft_wrap=True)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.print_line()

    def __enter__(self) -> Progress:
        if self.live:
            self._display = Live(self.stats, console=self.console, refresh_per_second=1)
            self._display.__enter__()
        else:
            self._ticker = asyncio.get_running_loop().create_task(self._tick(), name="progress-lines")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._display is not None:
            self._display.__exit__(exc_type, exc, tb)
        if self._ticker is not None:
            self._ticker.cancel()
            self.print_line()

