"""LocalPlacement: the GRPO stage on this machine: the run in this event loop, the learner in a process.

The run is composed by :func:`gymfleet.run.compose.open_run` (store, policy, env resources,
tasks, scheduler, signals), as for ``collect``. The scheduler and the engines run in this
process's event loop; the learner runs in its own process (:class:`~gymfleet.run.learner.ProcessLearner`)
so it never blocks the loop. A watcher polls the bucket and hot-loads each new adapter version
into the engines (the router's broadcast) and the gateway's policy version; rollouts started
afterwards use it, and each generation is stamped with its version. A load that fails or times
out is retried (``adapter_load``); a version that fails every try is skipped, the engines keep
serving the previous one, the report lists it, and the run goes on.

When groups may start is the orchestrator's admission policy
(:class:`~gymfleet.orchestrator.Admission`); this stage only hot-loads versions and hands the
learner's progress on (:meth:`~gymfleet.orchestrator.Scheduler.learner_progressed`):

* ``async``: generation never waits for training except through the staleness gate and the
  ahead budget (at most ``max_staleness + 1`` steps' groups started ahead of the learner);
* ``sync`` (baseline): the same policy with ``max_staleness = 0``: one step's groups, then the
  next once the learner has claimed them and its version is loaded.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rich.console import Console

from gymfleet.core.errors import GymfleetError
from gymfleet.orchestrator import Admission, PolicyGateway, RunOutcome, Scheduler, RunStatus
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

    def admission(self) -> Admission:
        """The run's admission policy: async gates at ``max_staleness``; sync is lock-step (0)."""
        bound = 0 if self.cfg.mode == "sync" else self.cfg.run.max_staleness
        return Admission(bound, self.cfg.learner.groups_per_step)

    async def drive(self, gateway: PolicyGateway, scheduler: Scheduler, runner: asyncio.Task[RunOutcome]) -> None:
        """Hot-loads each new version and hands the learner's progress to admission, until the
        learner or the run ends (or the wall budget stops the learner)."""
        next_load = time.monotonic() + self.cfg.watch_interval_s
        steps = 0
        while self.learner.alive() and not runner.done():
            await asyncio.sleep(min(SAMPLE_S * 4, self.cfg.watch_interval_s))
            progress = self.learner.progress()
            if progress.steps > steps or time.monotonic() >= next_load:
                # a new step: serve its version first, so that the groups it lets start are sampled from it
                steps, next_load = progress.steps, time.monotonic() + self.cfg.watch_interval_s
                await self.hot_load(gateway)
            scheduler.learner_progressed(progress)
            if self.over_wall_budget():
                self.learner.stop()

    async def run(self, live: bool | None, progress_every_s: float | None) -> tuple[int | None, RunOutcome | BaseException | None]:
        """The stage proper; returns the learner's exit code and what the scheduler ended with."""
        cfg = self.cfg
        exitcode = None
        ended: RunOutcome | BaseException | None = None
        async with open_run(cfg.run, console=self.console, on_stop=self.request_stop,
                            admission=self.admission()) as run:
            self.started = True
            self.timeline.left_out = run.left_out
            scheduler, gateway = run.scheduler, run.gateway
            await self.hot_load(gateway)  # a resumed run starts from its newest version
            self.learner.start()
            runner = asyncio.create_task(scheduler.run(), name="scheduler")
            sampler = asyncio.create_task(self.sample_idle(scheduler), name="idle-sampler")
            try:
                with run.progress(live, extra=lambda: f"learner step {self.learner_step}", interval_s=progress_every_s):
                    await self.drive(gateway, scheduler, runner)
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
