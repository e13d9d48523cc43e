"""The training job: orchestrator, engines and learner together, asynchronously or in lock-step.

The run is composed by :func:`gymfleet.run.compose.open_run` (store, policy, env resources,
tasks, scheduler, signals), as for ``collect``. The scheduler and the engines run in this
process's event loop; the learner runs in its own
process (:mod:`gymfleet.trainer.worker`, multiprocessing spawn) so it never blocks the loop. A
watcher polls the bucket and hot-loads each new adapter version into the engines (the router's
broadcast) and the gateway's policy version; rollouts started afterwards use it, and each
generation is stamped with its version. A load that fails or times out is retried
(``adapter_load``); a version that fails every try is skipped, the engines keep serving the
previous one, the report lists it, and the run goes on.

* ``async``: generation never waits for training except through the staleness gate.
* ``sync`` (baseline): let exactly ``groups_per_step`` groups start, wait until the learner has
  trained on them and published, load the new version, repeat.

The job ends when the budget is spent (learner steps, or wall-clock seconds), writes the report
(:mod:`gymfleet.run.report`) and returns where it is. A learner that dies ends the job; the
same command resumes from the bucket.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from gymfleet.core.errors import GymfleetError, TrainError
from gymfleet.orchestrator.engines.config import TransformersEngineConfig
from gymfleet.orchestrator.scheduler import RunOutcome, Scheduler
from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.orchestrator.store.schema import RunStatus
from gymfleet.run.compose import open_run
from gymfleet.run.config import TrainConfig
from gymfleet.run.follow import BucketFollower
from gymfleet.run.heldout import BASE, HeldOutEvaluation, evaluate_heldout, run_policies
from gymfleet.run.report import GenerationTimeline, build_report, wall_time, write_report
from gymfleet.run.threads import usable_cpus
from gymfleet.run.verdict import no_learning_reason
from gymfleet.run.warmstart import warm_start_if_new
from gymfleet.trainer import AdapterBucket, learner_process

SAMPLE_S = 0.05
LEARNER_EXIT_WAIT_S = 600.0


@dataclass
class JobOutcome:
    """How a training job ended.

    Attributes:
        report_path: report.json.
        learner_exitcode: 0 when the learner spent its budget; negative (signal) or positive when
            it died (run the same command again to resume).
        report: the report's content.
    """

    report_path: Path
    learner_exitcode: int | None
    report: dict[str, Any]


class _Job:
    def __init__(self, cfg: TrainConfig, console: Console) -> None:
        self.cfg = cfg
        self.console = console
        self.bucket = AdapterBucket(cfg.bucket, cfg.run.run_id)
        self.timeline = GenerationTimeline(started_at=time.time())
        self.follower = BucketFollower(self.bucket, Path(cfg.report_dir) / "adapters", console,
                                       retries=cfg.adapter_load, loads=self.timeline.loads,
                                       failures=self.timeline.load_failures)
        self.t0 = time.monotonic()
        ctx = mp.get_context("spawn")
        self.stop = ctx.Event()
        self.attempts = ctx.Value("i", 0)
        self.wanted = ctx.Value("i", 0)
        """Groups the learner's refill asked for beyond a step's first claim (sync mode starts them)."""
        self.proc: Any = None
        self.ctx = ctx
        self.learner_step = 0
        self.signalled = False
        self.started = False
        """True once the run is composed (store, policy, envs): from then on a failure is reported."""

    def over_wall_budget(self) -> bool:
        limit = self.cfg.budget.max_wall_s
        return limit is not None and time.monotonic() - self.t0 >= limit

    def start_learner(self) -> None:
        args = self.cfg.worker_args()
        self.proc = self.ctx.Process(target=learner_process, args=(args, self.stop, self.attempts, self.wanted),
                                     name="gymfleet-learner")
        self.proc.start()

    async def hot_load(self, gateway: Any) -> None:
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
        self.stop.set()

    def learner_alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    async def drive_async(self, gateway: Any, runner: asyncio.Task[Any]) -> None:
        while self.learner_alive() and not runner.done():
            await asyncio.sleep(self.cfg.watch_interval_s)
            await self.hot_load(gateway)
            if self.over_wall_budget():
                self.stop.set()

    async def drive_sync(self, gateway: Any, scheduler: Scheduler, runner: asyncio.Task[Any]) -> None:
        limit = self.cfg.budget.max_steps
        while self.learner_alive() and not runner.done() and not self.over_wall_budget():
            if limit is not None and self.learner_step >= limit:
                break
            before, granted = self.attempts.value, self.wanted.value
            scheduler.add_group_budget(self.cfg.learner.groups_per_step)
            while self.attempts.value == before and self.learner_alive() and not runner.done():
                if self.wanted.value > granted:  # zero-variance groups to replace (dynamic sampling)
                    scheduler.add_group_budget(self.wanted.value - granted)
                    granted = self.wanted.value
                await asyncio.sleep(SAMPLE_S)
            await self.hot_load(gateway)
        self.stop.set()

    async def wait_learner(self) -> int | None:
        if self.proc is None:
            return None
        self.stop.set()
        await asyncio.to_thread(self.proc.join, LEARNER_EXIT_WAIT_S)
        if self.proc.is_alive():
            self.proc.kill()
            await asyncio.to_thread(self.proc.join)
        return self.proc.exitcode


async def train(cfg: TrainConfig, *, console: Console | None = None, live: bool | None = None,
                progress_every_s: float | None = None) -> JobOutcome:
    """Runs a training job until its budget is spent (or the learner dies) and writes its report.

    Args:
        cfg: the training run.
        console: where messages and progress go (default stderr).
        live: True: a rich live table; False: plain progress lines; None: live on a terminal.
        progress_every_s: seconds between plain progress lines (default 10).

    An adapter version the engines do not load (after ``adapter_load.attempts`` tries) is skipped
    and the run goes on (the report's ``adapter_load_failures``). A run that started but cannot go
    on (a GymfleetError: the store fails) still writes its report, with ``run_status: failed`` and
    ``error`` saying why.

    With ``warmstart.enabled`` on a run whose bucket is empty, the warm start
    (:mod:`gymfleet.run.warmstart`) publishes version 1 first. With ``heldout.enabled``, the
    base model, the warm-start and the final version are evaluated on the held-out instances at
    the end (the base first with ``heldout.base_first``): the report's ``evaluation`` section
    (:mod:`gymfleet.run.heldout`). The report's ``no_learning`` says why no learner step was made
    (None when one was).

    Raises:
        TrainError: the run stopped on a GymfleetError (a task's env or instances, the policy,
            the store); the message names the cause and the report.
    """
    console = console or Console(stderr=True)
    cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"shutdown": cfg.run.shutdown.model_copy(
        update={"mode": "abort"})})})
    Path(cfg.report_dir).mkdir(parents=True, exist_ok=True)
    evaluation = None
    if cfg.heldout.enabled and cfg.heldout.base_first:  # before anything trains
        evaluation = await evaluate_heldout(cfg, [BASE], _heldout_dir(cfg), console)
    stages_s = {"warm_start": time.monotonic()}
    await warm_start_if_new(cfg, console)  # warmstart.enabled on a new run: v1 from demonstrations
    stages_s["warm_start"] = time.monotonic() - stages_s["warm_start"]
    job = _Job(cfg, console)
    exitcode, ended, failure = None, None, None
    try:
        exitcode, ended = await _run(job, cfg, console, live, progress_every_s)
        if isinstance(ended, GymfleetError):  # the scheduler stopped on it (a store that refused a write)
            failure = ended
    except GymfleetError as exc:  # the run cannot go on (replicas refuse every adapter...): say why
        if not job.started:  # nothing ran (a bad store URL, no task can run): nothing to report
            raise
        failure = exc
        exitcode = await job.wait_learner()
    job.timeline.wall_s = time.monotonic() - job.t0
    report = build_report(Path(cfg.report_dir), cfg.mode, job.timeline, cfg.run.run_id)
    report["learner_exitcode"] = exitcode
    report["dynamic_sampling"] = cfg.learner.dynamic_sampling.model_dump(mode="json")
    report["torch_threads"] = {
        "cpus": usable_cpus(), "learner": report.pop("learner_torch_threads") or cfg.learner_threads,
        "engines": {e.name: e.n_threads for e in cfg.run.policy.engines if isinstance(e, TransformersEngineConfig)}}
    report["run_status"] = (ended.status if isinstance(ended, RunOutcome) else RunStatus.interrupted).value
    report["budget"] = cfg.budget.model_dump(mode="json")
    if failure is not None:
        report["run_status"], report["error"] = "failed", f"{type(failure).__name__}: {failure}"
    elif isinstance(ended, BaseException) and not isinstance(ended, asyncio.CancelledError):
        report["error"] = f"{type(ended).__name__}: {ended}"  # a bug: reported, then raised below
    elif cfg.heldout.enabled and not job.signalled:
        t_heldout = time.monotonic()
        report["evaluation"] = (await evaluate_end(cfg, console, evaluation)).as_dict()
        stages_s["heldout"] = time.monotonic() - t_heldout
    stages_s["grpo"] = job.timeline.wall_s
    report["wall_time"] = wall_time(stages_s, await _rollout_timings(cfg), report)
    report["no_learning"] = no_learning_reason(report)
    path = write_report(Path(cfg.report_dir), report)
    if isinstance(ended, BaseException) and failure is None and not isinstance(ended, asyncio.CancelledError):
        raise ended
    if failure is not None:
        raise TrainError(f"the training run stopped: {failure}; the report, with this reason, is at {path}") from failure
    return JobOutcome(path, exitcode, report)


async def _rollout_timings(cfg: TrainConfig) -> list[dict[str, float]]:
    """Every stored rollout's timings of the run (for the report's ``wall_time``); [] when the
    store cannot be read (the report is written anyway)."""
    try:
        async with await TrajectoryStore.open(cfg.run.store) as store:
            rows = await store.trajectories(cfg.run.run_id, limit=None)
    except GymfleetError:
        return []
    return [r.trajectory.timings for r in rows]


def _heldout_dir(cfg: TrainConfig) -> Path:
    return Path(cfg.report_dir) / "heldout"


async def evaluate_end(cfg: TrainConfig, console: Console,
                       known: HeldOutEvaluation | None = None) -> HeldOutEvaluation:
    """The held-out evaluation of every policy the run's bucket has (the base, unless ``known``
    holds it already): what ``train`` and ``train --cluster`` put in the report's ``evaluation``."""
    bucket = AdapterBucket(cfg.bucket, cfg.run.run_id)
    policies = await asyncio.to_thread(run_policies, bucket, _heldout_dir(cfg) / "adapters")
    console.print(f"held-out evaluation of {', '.join(p.name for p in policies)} on "
                  f"{sum(map(len, cfg.heldout.instances.values()))} instances", markup=False, highlight=False)
    return await evaluate_heldout(cfg, policies, _heldout_dir(cfg), console, known)


async def _run(job: _Job, cfg: TrainConfig, console: Console, live: bool | None,
               progress_every_s: float | None) -> tuple[int | None, Any]:
    """The job's run proper; returns the learner's exit code and what the scheduler ended with."""
    exitcode = None
    ended: RunOutcome | BaseException | None = None
    async with open_run(cfg.run, console=console, on_stop=job.request_stop) as run:
        job.started = True
        job.timeline.left_out = run.left_out
        scheduler, gateway = run.scheduler, run.gateway
        await job.hot_load(gateway)  # a resumed run starts from its newest version
        if cfg.mode == "sync":
            scheduler.group_budget = 0
        job.start_learner()
        runner = asyncio.create_task(scheduler.run(), name="scheduler")
        sampler = asyncio.create_task(job.sample_idle(scheduler), name="idle-sampler")
        try:
            with run.progress(live, extra=lambda: f"learner step {job.learner_step}", interval_s=progress_every_s):
                if cfg.mode == "sync":
                    await job.drive_sync(gateway, scheduler, runner)
                else:
                    await job.drive_async(gateway, runner)
                exitcode = await job.wait_learner()
                await job.hot_load(gateway)
        finally:
            job.stop.set()
            budget_spent = exitcode == 0 and not job.signalled  # the learner ended on its budget
            scheduler.request_stop(budget_spent=budget_spent)
            scheduler.request_stop()
            (ended,) = await asyncio.gather(runner, return_exceptions=True)
            sampler.cancel()
            if exitcode is None:
                exitcode = await job.wait_learner()
    return exitcode, ended

