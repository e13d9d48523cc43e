"""Runs a collection from a run config: store, policy, envs, scheduler, progress and signals."""

from __future__ import annotations

import asyncio
import signal
from contextlib import nullcontext
from pathlib import Path

from rich.console import Console
from rich.live import Live

from gymfleet.orchestrator.config import RunConfig, load_run_config
from gymfleet.orchestrator.envfactory import env_factory, resolve_instances
from gymfleet.orchestrator.metrics import MetricsWriter
from gymfleet.orchestrator.policy import open_gateway
from gymfleet.orchestrator.scheduler import RunOutcome, Scheduler
from gymfleet.orchestrator.store import TrajectoryStore


class ConfigWatcher:
    """Re-reads the config file when it changes (for live weight edits); None when unchanged."""

    def __init__(self, path: Path, overrides: list[str]) -> None:
        self.path = path
        self.overrides = overrides
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
        return load_run_config(self.path, self.overrides)


async def collect(
    config: RunConfig,
    *,
    config_path: Path | None = None,
    overrides: list[str] | None = None,
    console: Console | None = None,
    live: bool = True,
) -> RunOutcome:
    """Runs ``config`` until its work is done or SIGINT/SIGTERM stops it.

    The first signal stops admission and lets in-flight rollouts finish (``shutdown.mode:
    finish``) or aborts them (``abort``) within ``shutdown.deadline_s``; a second aborts at once.
    Starting the same config again resumes the run.

    Raises:
        ConfigError: a task's env or instances, or the policy, cannot be set up.
    """
    console = console or Console(stderr=True)
    factories = {t.name: env_factory(t) for t in config.tasks}
    instances = {t.name: await resolve_instances(t, factories[t.name]) for t in config.tasks}
    watcher = ConfigWatcher(config_path, overrides or []) if config_path else None
    async with await TrajectoryStore.open(config.store) as store, open_gateway(
        config.policy, config.run_id, max_staleness=config.max_staleness, sampling=config.tasks[0].sampling
    ) as gateway:
        with MetricsWriter(config.metrics_path) as metrics:
            scheduler = Scheduler(config, store, gateway, factories, instances, metrics=metrics,
                                  reload_config=watcher)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, scheduler.request_stop)
            try:
                display = Live(scheduler.stats, console=console, refresh_per_second=2) if live else nullcontext()
                with display:
                    outcome = await scheduler.run()
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
    return outcome
