"""LocalPlacement: the GRPO stage on this machine: the run in this event loop, the learner in a process.

The run is composed by :func:`gymfleet.run.compose.open_run` (store, policy, env resources,
tasks, scheduler, signals), as for ``collect``. The scheduler and the engines run in this
process's event loop; the learner runs in its own process (:class:`~gymfleet.run.learner.ProcessLearner`)
so it never blocks the loop. A watcher polls the bucket and hot-loads each new adapter version
into the engines (the router's broadcast) and the gateway's policy version; rollouts started
afterwards use it, and each generation is stamped with its version. A load that fails or times
out is retried (``adapter_load``); a version that fails every try is skipped, the engines keep
serving the previous one, the report lists it, and the run goes on.

* ``async``: generation never waits for training except through the staleness gate and the
  ahead budget (at most ``max_staleness + 1`` steps' groups started ahead of the learner,
  :class:`AheadBudget`).
* ``sync`` (baseline): let exactly ``groups_per_step`` groups start, wait until the learner has
  trained on them and published, load the new version, repeat.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rich.console import Console

from gymfleet.core.errors import GymfleetError
from gymfleet.orchestrator import PolicyGateway, RunOutcome, Scheduler, RunStatus
from gymfleet.run.compose import open_run
from gymfleet.run.config import TrainConfig
from gymfleet.run.follow import BucketFollower
from gymfleet.run.heldout import HeldOutEvaluation, heldout_stage
from gymfleet.run.learner import LearnerHandle, ProcessLearner
from gymfleet.run.placement import GrpoOutcome
from gymfleet.run.records import GenerationTimeline
from gymfleet.run.warmstart import WarmStartOutcome, warm_start_if_new
from gymfleet.trainer import AdapterBucket

SAMPLE_S = 0.05
STARVED_S = 30.0
"""Seconds without a learner step, nothing in flight, the ahead budget spent and a task
quarantined, before the async job lets one more step's groups start (:meth:`AheadBudget.starved`)."""


class AheadBudget:
    """How far generation may run ahead of the learner in async mode: at most
    ``(max_staleness + 1 + steps) * groups_per_step`` groups (plus the learner's dynamic-sampling
    refills) have started after ``steps`` learner steps, AReaL's staleness-aware admission (Fu et
    al. 2025, "AReaL", sec. 5.1: at most ``(i + eta + 1) * B`` trajectories at policy version
    ``i``). Without it, generation outruns a slower learner and the extra groups go stale and are
    dropped: CPU taken from the learner for nothing (measured on the slow-step terminal task:
    106 rollouts generated, 46 samples trained, 50 dropped as stale in 5 steps; docs/train.md).
    ``max_staleness`` None: no bound (admission is then limited by ``max_in_flight`` only)."""

    def __init__(self, max_staleness: int | None, groups_per_step: int) -> None:
        self.max_staleness, self.groups_per_step = max_staleness, groups_per_step
        self.steps = 0
        self.refills = 0

    def open(self, scheduler: Scheduler) -> None:
        """Grants the first ``max_staleness + 1`` steps' groups."""
        if self.max_staleness is not None:
            scheduler.group_budget = 0
            scheduler.add_group_budget((self.max_staleness + 1) * self.groups_per_step)

    def starved(self, scheduler: Scheduler) -> bool:
        """True when generation is held by the budget with nothing in flight while a task is
        quarantined: the groups the quarantined task was handed never complete, so the learner
        may wait for ever on groups no one generates (the caller grants a step's groups after
        :data:`STARVED_S` without a learner step)."""
        return (self.max_staleness is not None and scheduler.group_budget == 0 and scheduler.stats.in_flight == 0
                and any(w.quarantined for w in scheduler.work.values()))

    def top_up(self, scheduler: Scheduler, steps: int, refills: int) -> None:
        """Grants ``groups_per_step`` groups per learner step taken since the last call, and the
        groups the learner's refills asked for (``steps``, ``refills``: the learner's counters)."""
        if self.max_staleness is None:
            return
        more = max(steps - self.steps, 0) * self.groups_per_step + max(refills - self.refills, 0)
        self.steps, self.refills = max(self.steps, steps), max(self.refills, refills)
        if more:
            scheduler.add_group_budget(more)


class _Grpo:
    """One GRPO stage on this machine: the learner's handle, the bucket's follower, the timeline."""

    def __init__(self, cfg: TrainConfig, console: Console) -> None:
        self.cfg = cfg
        self.console = console
        self.timeline = GenerationTimeline(started_at=time.time())
        self.follower = BucketFollower(AdapterBucket(cfg.bucket, cfg.run.run_id), Path(cfg.report_dir) / "adapters",
                                       console, retries=cfg.adapter_load, loads=self.timeline.loads,
                                       failures=self.timeline.load_failures)
        self.learner: LearnerHandle = ProcessLearner(cfg.worker_args())
        self.t0 = time.monotonic()
        self.learner_step = 0
        self.signalled = False
        self.started = False
        """True once the run is composed (store, policy, envs): from then on a failure is reported."""

    def over_wall_budget(self) -> bool:
        limit = self.cfg.budget.max_wall_s
        return limit is not None and time.monotonic() - self.t0 >= limit

    def reached_max_steps(self) -> bool:
        """True once the bucket's newest version is at ``budget.max_steps``: a Ctrl-C that lands
        on the last step still ends the run ``completed (budget)``, as a rerun then reports it
        (:func:`gymfleet.run.job._refuse_if_complete` reads the same bucket)."""
        limit = self.cfg.budget.max_steps
        return limit is not None and self.learner_step >= limit

    async def hot_load(self, gateway: PolicyGateway) -> None:
        """Loads the bucket's newest version (:class:`BucketFollower`: retried, or skipped with
        the previous version kept); the learner's step is the newest version's, loaded or not."""
        await self.follower.load_newest(gateway)
        self.learner_step = max(self.learner_step, self.follower.step)

    async def sample_idle(self, scheduler: Scheduler) -> None:
        while True:
            await asyncio.sleep(SAMPLE_S)
            if scheduler.stats.in_flight == 0:
                self.timeline.generation_idle_s += SAMPLE_S
            if scheduler.stats.paused == "staleness":
                self.timeline.staleness_paused_s += SAMPLE_S

    def request_stop(self) -> None:
        """Ctrl-C / SIGTERM: the learner finishes its step, publishes, exits; then the job ends."""
        self.signalled = True
        self.console.print("[yellow]stopping:[/yellow] the learner publishes what it trained, then the job ends")
        self.learner.stop()

    async def drive_async(self, gateway: PolicyGateway, scheduler: Scheduler, runner: asyncio.Task[RunOutcome]) -> None:
        """Async: hot-loads each new version; with a staleness bound ``s``, lets at most ``s + 1``
        steps' groups start ahead of the learner (:class:`AheadBudget`)."""
        ahead = AheadBudget(self.cfg.run.max_staleness, self.cfg.learner.groups_per_step)
        ahead.open(scheduler)
        next_load = time.monotonic() + self.cfg.watch_interval_s
        last_step = time.monotonic()
        while self.learner.alive() and not runner.done():
            await asyncio.sleep(min(SAMPLE_S * 4, self.cfg.watch_interval_s))
            if self.learner.attempts > ahead.steps:  # the step's version is published: serve it first,
                await self.hot_load(gateway)  # so that the groups it lets start are sampled from it
                last_step = time.monotonic()
            ahead.top_up(scheduler, self.learner.attempts, self.learner.wanted)
            if ahead.starved(scheduler) and time.monotonic() - last_step >= STARVED_S:
                scheduler.add_group_budget(self.cfg.learner.groups_per_step)  # replace what quarantine took
                last_step = time.monotonic()
            if time.monotonic() >= next_load:
                next_load = time.monotonic() + self.cfg.watch_interval_s
                await self.hot_load(gateway)
            if self.over_wall_budget():
                self.learner.stop()

    async def drive_sync(self, gateway: PolicyGateway, scheduler: Scheduler, runner: asyncio.Task[RunOutcome]) -> None:
        limit = self.cfg.budget.max_steps
        while self.learner.alive() and not runner.done() and not self.over_wall_budget():
            if limit is not None and self.learner_step >= limit:
                break
            before, granted = self.learner.attempts, self.learner.wanted
            scheduler.add_group_budget(self.cfg.learner.groups_per_step)
            while self.learner.attempts == before and self.learner.alive() and not runner.done():
                if self.learner.wanted > granted:  # zero-variance groups to replace (dynamic sampling)
                    scheduler.add_group_budget(self.learner.wanted - granted)
                    granted = self.learner.wanted
                await asyncio.sleep(SAMPLE_S)
            await self.hot_load(gateway)
        self.learner.stop()

    async def run(self, live: bool | None, progress_every_s: float | None) -> tuple[int | None, RunOutcome | BaseException | None]:
        """The stage proper; returns the learner's exit code and what the scheduler ended with."""
        cfg = self.cfg
        exitcode = None
        ended: RunOutcome | BaseException | None = None
        async with open_run(cfg.run, console=self.console, on_stop=self.request_stop) as run:
            self.started = True
            self.timeline.left_out = run.left_out
            scheduler, gateway = run.scheduler, run.gateway
            await self.hot_load(gateway)  # a resumed run starts from its newest version
            if cfg.mode == "sync":
                scheduler.group_budget = 0
            self.learner.start()
            runner = asyncio.create_task(scheduler.run(), name="scheduler")
            sampler = asyncio.create_task(self.sample_idle(scheduler), name="idle-sampler")
            try:
                with run.progress(live, extra=lambda: f"learner step {self.learner_step}", interval_s=progress_every_s):
                    if cfg.mode == "sync":
                        await self.drive_sync(gateway, scheduler, runner)
                    else:
                        await self.drive_async(gateway, scheduler, runner)
                    exitcode = await self.learner.wait()
                    await self.hot_load(gateway)
            finally:
                self.learner.stop()
                budget_spent = exitcode == 0 and (not self.signalled or self.reached_max_steps())
                scheduler.request_stop(budget_spent=budget_spent, abort=True)  # the learner is done
                (ended,) = await asyncio.gather(runner, return_exceptions=True)
                sampler.cancel()
                if exitcode is None:
                    exitcode = await self.learner.wait()
        return exitcode, ended


class LocalPlacement:
    """Every role of the job on this machine (:mod:`gymfleet.run.local`): the warm start and the
    held-out evaluation in this event loop, GRPO's orchestrator here and its learner in a process."""

    async def warm_start(self, cfg: TrainConfig, console: Console) -> WarmStartOutcome | None:
        """See :meth:`gymfleet.run.placement.Placement.warm_start`."""
        return await warm_start_if_new(cfg, console)

    async def heldout(self, cfg: TrainConfig, console: Console, *, base_only: bool = False,
                      known: HeldOutEvaluation | None = None) -> HeldOutEvaluation:
        """See :meth:`gymfleet.run.placement.Placement.heldout`."""
        return await heldout_stage(cfg, console, base_only=base_only, known=known)

    async def grpo(self, cfg: TrainConfig, console: Console, live: bool | None = None,
                   progress_every_s: float | None = None) -> GrpoOutcome:
        """Runs the stage; see :meth:`gymfleet.run.placement.Placement.grpo`.

        Raises:
            GymfleetError: the run could not be composed (a bad store URL, no task can run here).
        """
        stage = _Grpo(cfg, console)
        exitcode: int | None = None
        ended: RunOutcome | BaseException | None = None
        failure: GymfleetError | None = None
        try:
            exitcode, ended = await stage.run(live, progress_every_s)
            if isinstance(ended, GymfleetError):  # the scheduler stopped on it (a store that refused a write)
                failure = ended
        except GymfleetError as exc:  # the run cannot go on (replicas refuse every adapter...): say why
            if not stage.started:  # nothing ran: nothing to report
                raise
            failure = exc
            exitcode = await stage.learner.wait()
        stage.timeline.wall_s = time.monotonic() - stage.t0
        status = ended.status if isinstance(ended, RunOutcome) else RunStatus.interrupted
        crash = ended if isinstance(ended, BaseException) and failure is None and not isinstance(
            ended, (asyncio.CancelledError, GymfleetError)) else None
        return GrpoOutcome(stage.timeline, RunStatus.failed if failure is not None else status, exitcode, failure, crash,
                           stage.signalled)
