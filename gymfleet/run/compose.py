"""open_run: the composition root. One place builds a run from its config: ``collect``, ``train``
(locally and each shard of ``train --cluster``), the held-out evaluation and the demonstrations
use it; it is the only place that opens env resources and starts a run in the store
(``tests/run/test_one_run_path.py``).

Order (each step can fail with a one-line ConfigError before anything heavy is opened):

1. the env resources (sandbox backends and pools, the reaper, the shared browser), and with them
   the tasks this machine cannot run, left out with a message;
2. the task factories (one env per rollout, on the shared resources) and their instance lists;
3. the trajectory store, the policy (gateway, router, engines), the metrics file;
4. the scheduler over all of the above, and the SIGINT/SIGTERM handlers.

Everything is closed in reverse order when the ``async with`` ends.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field

from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from gymfleet.core.errors import ConfigError
from gymfleet.core.records import SamplingParams
from gymfleet.core.strict import validation_problems
from gymfleet.envs.resources import EnvResources
from gymfleet.orchestrator import (
    RunConfig, env_factory, resolve_instances, unmet_needs, MetricsWriter, open_gateway, Gateway,
    HARNESS_ENV_ID, open_harness_rollouts, PolicyGateway, EnvFactory, Scheduler, TrajectoryStore, Admission,
)
from gymfleet.run.display import Progress

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class Run:
    """A composed run: what :func:`open_run` opened, valid inside its ``async with``.

    Attributes:
        config: the run config with the left-out tasks removed.
        store: the trajectory store.
        gateway: the policy the rollouts talk to.
        resources: the envs' shared resources.
        factories: per task name, makes one env per rollout.
        instances: per task name, the instance ids it runs.
        metrics: the metrics file.
        scheduler: drives the rollouts (``await run.scheduler.run()``).
        console: where messages and progress go.
        left_out: per task name left out, why (a need this machine lacks).
    """

    config: RunConfig
    store: TrajectoryStore
    gateway: PolicyGateway
    resources: EnvResources
    factories: dict[str, EnvFactory]
    instances: dict[str, list[str]]
    metrics: MetricsWriter
    scheduler: Scheduler
    console: Console
    left_out: dict[str, str] = field(default_factory=dict)

    def progress(self, live: bool | None = None, extra: Callable[[], str] | None = None,
                 interval_s: float | None = None) -> Progress:
        """The run's progress display (a context manager): a rich live table on a terminal,
        plain lines every ``interval_s`` otherwise; ``live=False`` forces plain lines.

        Args:
            extra: appended to each plain line (e.g. the learner's step).
        """
        return Progress(self.scheduler.stats, self.console, live=live, extra=extra, interval_s=interval_s)


def runnable_tasks(config: RunConfig, resources: EnvResources) -> tuple[RunConfig, dict[str, str]]:
    """The config without the tasks whose needs this machine lacks, and why each was left out.

    Raises:
        ConfigError: no task is left (the message names each missing need), or a task's env id
            is unknown.
    """
    kept, left_out = [], {}
    for task in config.tasks:
        reasons = unmet_needs(task, resources)
        if reasons:
            left_out[task.name] = "; ".join(reasons)
        else:
            kept.append(task)
    if not kept:
        raise ConfigError(f"no task of run {config.run_id} can run here: "
                          + "; ".join(f"{k}: {v}" for k, v in left_out.items()))
    return config.model_copy(update={"tasks": kept}), left_out


async def _task_envs(config: RunConfig, resources: EnvResources) -> tuple[dict[str, EnvFactory], dict[str, list[str]]]:
    """Per task, the env factory and the instance ids (making one env of each task once).

    Raises:
        ConfigError: a task's env id is unknown, its ``env_kwargs`` do not fit the env, or its
            instances are wrong.
    """
    factories, instances = {}, {}
    for task in config.tasks:
        factories[task.name] = env_factory(task, resources)
        try:
            instances[task.name] = await resolve_instances(task, factories[task.name])
        except (ValidationError, TypeError) as exc:  # the env refused its arguments
            detail = validation_problems(exc) if isinstance(exc, ValidationError) else str(exc)
            raise ConfigError(f"task {task.name}: env_kwargs {task.env_kwargs} do not fit {task.env_id}: "
                              f"{detail}") from exc
    return factories, instances


@contextmanager
def _stop_signals(on_stop: Callable[[], None]) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only (a Ray actor): its launcher stops it instead
        return
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_stop)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


@asynccontextmanager
async def open_run(
    config: RunConfig,
    *,
    console: Console | None = None,
    reload_config: Callable[[], RunConfig | None] | None = None,
    on_stop: Callable[[], None] | None = None,
    gateway: PolicyGateway | None = None,
    harness_gateway: Gateway | None = None,
    admission: Admission | None = None,
) -> AsyncIterator[Run]:
    """Composes the run ``config`` describes and closes it all at the end.

    Args:
        config: the run.
        console: where messages go (default: stderr).
        reload_config: handed to the scheduler (live weight changes); None: none.
        on_stop: called on SIGINT/SIGTERM; default ``scheduler.request_stop`` (the first stops
            admission, the second aborts).
        gateway: the policy, instead of the one ``config.policy`` builds (the demonstrations'
            gold-policy gateway); the caller owns it.
        harness_gateway: the TITO gateway that harness tasks' sessions sample through, when it
            is not ``gateway`` (the demonstrations: gold forced through each harness,
            docs/harness.md); its trajectories are marked as demonstrations.
        admission: the scheduler's admission policy (a training run's ahead budget); None: the
            staleness gate of ``config.max_staleness`` only.

    Yields:
        The :class:`Run`.

    Raises:
        ConfigError: no task can run here, a task's env or instances cannot be set up, or the
            policy cannot be built.
        StoreError: the store cannot be opened.
    """
    console = console or Console(stderr=True)
    async with AsyncExitStack() as stack:
        resources = await stack.enter_async_context(EnvResources.open(config.resources, run_id=config.run_id))
        config, left_out = runnable_tasks(config, resources)
        for name, why in left_out.items():
            console.print(Text(f"task {name} left out: ", style="yellow") + Text(why))
        factories, instances = await _task_envs(config, resources)
        store = await stack.enter_async_context(await TrajectoryStore.open(config.store))
        if gateway is None:
            gateway = await stack.enter_async_context(open_gateway(
                config.policy, config.run_id, max_staleness=config.max_staleness,
                sampling=SamplingParams(**config.sampling.model_dump())))
        metrics = stack.enter_context(MetricsWriter(config.metrics_path))
        make_rollout = None
        if any(t.env_id == HARNESS_ENV_ID for t in config.tasks):  # docs/harness.md
            if harness_gateway is not None:
                make_rollout = await stack.enter_async_context(open_harness_rollouts(harness_gateway,
                                                                                     demonstration=True))
            elif isinstance(gateway, Gateway):
                make_rollout = await stack.enter_async_context(open_harness_rollouts(gateway))
        scheduler = Scheduler(config, store, gateway, factories, instances, metrics=metrics,
                              reload_config=reload_config, make_rollout=make_rollout, admission=admission)
        stack.enter_context(_stop_signals(on_stop or scheduler.request_stop))
        yield Run(config, store, gateway, resources, factories, instances, metrics, scheduler, console, left_out)
