"""`collect`: runs a collection (rollouts only, no learner) from a run config, through open_run;
as a shard of a training run it follows the learner's bucket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from gymfleet.core.errors import ConfigError
from gymfleet.orchestrator import RunConfig, RunOutcome, Scheduler
from gymfleet.run.compose import open_run
from gymfleet.run.config import load_shard_config
from gymfleet.run.follow import BucketFollower


class ConfigWatcher:
    """Re-reads the config file when it changes (for live weight edits); None when unchanged.

    Each edit is acknowledged on ``console``: the new weights when they changed, or why the edit
    was refused (the run keeps its weights); an edit that changes no weight says so too.

    Args:
        path: the config file.
        overrides: the ``KEY.PATH=VALUE`` overrides re-applied on each read.
        console: where edits are acknowledged (None: silent).
        weights: the weights the run starts with.
    """

    def __init__(self, path: Path, overrides: list[str], console: Console | None = None,
                 weights: dict[str, float] | None = None) -> None:
        self.path = path
        self.overrides = overrides
        self.console = console
        self.weights = dict(weights or {})
        self.mtime_ns = self._mtime()

    def _mtime(self) -> int:
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return 0

    def __call__(self) -> RunConfig | None:
        mtime = self._mtime()
        if mtime == self.mtime_ns:
            return None
        self.mtime_ns = mtime
        try:
            fresh = load_shard_config(self.path, self.overrides)[0]
        except ConfigError as exc:
            self._say(f"config edit not applied, the run keeps its weights: {exc}")
            raise
        weights = {t.name: t.weight for t in fresh.tasks}
        if weights != self.weights:
            self._say(f"weights now {_weights_text(weights)} (was {_weights_text(self.weights)}), from {self.path}")
        else:
            self._say(f"{self.path} changed; weights unchanged ({_weights_text(weights)})")
        self.weights = weights
        return fresh

    def _say(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)


def _weights_text(weights: dict[str, float]) -> str:
    return " ".join(f"{name}={weight:g}" for name, weight in weights.items())


STALL_CHECK_S = 2.0
"""Seconds between two looks at whether anything can still run (:func:`_say_when_stalled`)."""


def stalled_reason(scheduler: Scheduler) -> str | None:
    """Why nothing can start although work is left (every task with work left has weight 0), or
    None when something runs or can start."""
    waiting = scheduler.stuck_at_weight_zero()
    if not waiting:
        return None
    return (f"nothing can run: the tasks with work left ({', '.join(waiting)}) have weight 0; raise a weight "
            "in the config (read live) to go on, or stop with Ctrl-C (rerun to resume)")


async def _say_when_stalled(scheduler: Scheduler, console: Console, interval_s: float = STALL_CHECK_S) -> None:
    """Prints :func:`stalled_reason` once each time the run stalls (not again until it moves)."""
    said = None
    while True:
        await asyncio.sleep(interval_s)
        reason = stalled_reason(scheduler)
        if reason is not None and reason != said:
            console.print(reason, markup=False, highlight=False, soft_wrap=True)
        said = reason


async def collect(
    config: RunConfig,
    *,
    config_path: Path | None = None,
    overrides: list[str] | None = None,
    console: Console | None = None,
    live: bool | None = None,
    progress_every_s: float | None = None,
    follower: BucketFollower | None = None,
    follow_interval_s: float = 1.0,
    stop: asyncio.Event | None = None,
) -> RunOutcome:
    """Runs ``config`` until its work is done or SIGINT/SIGTERM stops it.

    The first signal stops admission and lets in-flight rollouts finish (``shutdown.mode:
    finish``) or aborts them (``abort``) within ``shutdown.deadline_s``; a second aborts at once.
    Starting the same config again resumes the run.

    Args:
        config: the run.
        config_path: the YAML it came from; re-read when it changes (live weights).
        overrides: the ``KEY.PATH=VALUE`` overrides to re-apply on each re-read.
        console: where progress goes (default stderr).
        live: True: a rich live table; False: plain progress lines; None: live on a terminal.
        progress_every_s: seconds between plain progress lines (default 10).
        follower: hot-loads the learner's new adapter versions (a shard of a training run): the
            newest before the first rollout, then every ``follow_interval_s`` seconds. A version
            that fails to load is retried, then skipped (:class:`BucketFollower`); the previous
            one stays served.
        stop: once set, the run stops as on a signal (a launcher's stop, where there are no
            signals: a Ray actor).

    Raises:
        ConfigError: no task can run here, a task's env or instances, or the policy, cannot be set up.
    """
    console = console or Console(stderr=True)
    watcher = ConfigWatcher(config_path, overrides or [], console, {t.name: t.weight for t in config.tasks}) \
        if config_path else None
    async with open_run(config, console=console, reload_config=watcher) as run:
        helpers = [asyncio.create_task(_say_when_stalled(run.scheduler, console), name="stall-check")]
        if follower is not None:
            await follower.load_newest(run.gateway)  # a resumed shard starts from the newest version
            helpers.append(asyncio.create_task(follower.follow(run.gateway, follow_interval_s), name="follow-bucket"))
        if stop is not None:
            helpers.append(asyncio.create_task(_stop_when(stop, run.scheduler.request_stop), name="stop-event"))
        try:
            with run.progress(live, interval_s=progress_every_s):
                return await run.scheduler.run()
        finally:
            for helper in helpers:
                helper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await helper


async def _stop_when(stop: asyncio.Event, request_stop: Callable[[], None]) -> None:
    await stop.wait()
    request_stop()

