"""The training job: a list of stages over one run, whatever places its roles.

1. **held-out base** (``heldout.base_first``): the base model scored before anything trains;
2. **warm start** (``warmstart.enabled`` on an empty bucket): demonstrations, SFT, v1 published
   (:mod:`gymfleet.run.warmstart`);
3. **GRPO**: rollouts and the learner until the budget is spent, run by a
   :class:`~gymfleet.run.placement.Placement`: :class:`~gymfleet.run.local.LocalPlacement`
   (``gymfleet train``) or :class:`~gymfleet.run.cluster.RayPlacement` (``train --cluster``);
4. **held-out evaluation** (``heldout.enabled``): base, warm-start and final version on the
   held-out instances (:mod:`gymfleet.run.heldout`);
5. **report and verdict**: one :class:`~gymfleet.run.records.TrainReport`, written once
   (:mod:`gymfleet.run.report`), with why nothing was learned when nothing was
   (:mod:`gymfleet.run.verdict`).

A learner that dies ends the job; the same command resumes from the bucket.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from gymfleet.core.errors import GymfleetError, TrainError
from gymfleet.orchestrator import TransformersEngineConfig, task_needs, TrajectoryStore
from gymfleet.run.config import TrainConfig
from gymfleet.run.heldout import HeldOutEvaluation
from gymfleet.run.local import LocalPlacement
from gymfleet.run.placement import GrpoOutcome, Placement
from gymfleet.run.records import TorchThreads, TrainReport
from gymfleet.run.report import build_report, write_report
from gymfleet.run.resume import refuse_changed_settings
from gymfleet.run.tracking import Tracking, tracked
from gymfleet.run.threads import usable_cpus
from gymfleet.trainer import AdapterBucket


@dataclass
class JobOutcome:
    """How a training job ended.

    Attributes:
        report_path: report.json.
        learner_exitcode: 0 when the learner spent its budget; negative (signal) or positive when
            it died (run the same command again to resume); None when not known (a cluster).
        report: the report's content.
    """

    report_path: Path
    learner_exitcode: int | None
    report: TrainReport


@dataclass
class _Job:
    """What the stages share over one run."""

    cfg: TrainConfig
    placement: Placement
    console: Console
    live: bool | None = None
    progress_every_s: float | None = None
    stages_s: dict[str, float] = field(default_factory=dict)
    evaluation: HeldOutEvaluation | None = None
    grpo: GrpoOutcome | None = None
    tracking: Tracking | None = None


async def _heldout_base(job: _Job) -> bool:
    if not (job.cfg.heldout.enabled and job.cfg.heldout.base_first):
        return False
    job.evaluation = await job.placement.heldout(job.cfg, job.console, base_only=True)  # before training
    return True


async def _warm_start(job: _Job) -> bool:
    await job.placement.warm_start(job.cfg, job.console)  # warmstart.enabled on a new run: v1 from demonstrations
    return True


async def _grpo(job: _Job) -> bool:
    job.grpo = await job.placement.grpo(job.cfg, job.console, job.live, job.progress_every_s)
    return True


async def _heldout(job: _Job) -> bool:
    if not (job.cfg.heldout.enabled and job.grpo is not None and job.grpo.may_evaluate):
        job.evaluation = None  # a run that failed or was stopped is not evaluated
        return False
    job.evaluation = await job.placement.heldout(job.cfg, job.console, known=job.evaluation)
    return True


Stage = Callable[[_Job], Awaitable[bool]]
"""One stage of the job: does its work on the shared :class:`_Job`; True when it ran (its time is reported)."""

STAGES: tuple[tuple[str, Stage], ...] = (
    ("heldout", _heldout_base), ("warm_start", _warm_start), ("grpo", _grpo), ("heldout", _heldout))
"""The job's stages in order, each with the report's ``wall_time.stages_s`` key its time adds to
(``heldout``: the base first, when ``heldout.base_first``, and the others at the end)."""


async def run_job(cfg: TrainConfig, placement: Placement, *, console: Console | None = None,
                  live: bool | None = None, progress_every_s: float | None = None) -> JobOutcome:
    """Runs the job's :data:`STAGES` over ``cfg``'s run, the GRPO stage on ``placement``, and
    writes its report.

    Raises:
        TrainError: the run stopped on a GymfleetError after it started (a task's env, the policy,
            the store); the message names the cause and the report, which says it too.
        GymfleetError: the run could not start (nothing to report), or a stage before GRPO failed.
        ConfigError: a task's env id is unknown or its ``env_kwargs`` do not fit, or a rerun
            changes a setting the run's adapters were trained with (:mod:`gymfleet.run.resume`),
            before any folder, store or tracker is opened.
        RunCompleteError: the run already made its ``budget.max_steps`` learner steps.
    """
    console = console or Console(stderr=True)
    for task in cfg.run.tasks:  # an unknown env id or a bad env_kwargs: refused before anything is opened
        task_needs(task)
    refuse_changed_settings(cfg)  # a LoRA shape, model or dtype the run's adapters were not trained with
    _refuse_if_complete(cfg)
    Path(cfg.report_dir).mkdir(parents=True, exist_ok=True)
    job = _Job(cfg, placement, console, live, progress_every_s)
    spent: dict[str, float] = {}
    async with tracked(cfg) as job.tracking:  # report_to: the record files followed into the trackers
        for key, stage in STAGES:
            t0 = time.monotonic()
            if await stage(job):
                spent[key] = spent.get(key, 0.0) + time.monotonic() - t0
        if job.evaluation is None:
            spent.pop("heldout", None)
        if job.grpo is not None:
            spent["grpo"] = job.grpo.timeline.wall_s  # the roles' own time, not their start-up and shut-down
        job.stages_s = {k: spent[k] for k in ("warm_start", "grpo", "heldout") if k in spent}
        return await _report(job)


class RunCompleteError(GymfleetError):
    """The run already made its ``budget.max_steps`` learner steps: a rerun has nothing to do."""


def _refuse_if_complete(cfg: TrainConfig) -> None:
    """Raises :class:`RunCompleteError` when the bucket's newest version is at ``budget.max_steps``
    (a rerun would only collect rollouts no learner step uses and evaluate the same adapter again)."""
    if cfg.budget.max_steps is None:
        return
    bucket = AdapterBucket(cfg.bucket, cfg.run.run_id)
    newest = bucket.newest_version()
    step = bucket.get(newest).meta.get("step", 0) if newest else 0
    if isinstance(step, int) and step >= cfg.budget.max_steps:
        raise RunCompleteError(
            f"run {cfg.run.run_id} is complete: its learner made budget.max_steps={cfg.budget.max_steps} steps "
            f"(v{newest} in {cfg.bucket}); to train further, raise it (--set budget.max_steps=N); its report is "
            f"in {cfg.report_dir}")


async def _report(job: _Job) -> JobOutcome:
    """The stage that ends every job: its one report, written; the GRPO stage's failure raised."""
    cfg, grpo = job.cfg, job.grpo
    assert grpo is not None
    report = build_report(
        Path(cfg.report_dir), cfg.mode, grpo.timeline, cfg.run.run_id,
        run_status=grpo.run_status.value, budget=cfg.budget, learner_exitcode=grpo.learner_exitcode,
        dynamic_sampling=cfg.learner.dynamic_sampling,
        torch_threads=TorchThreads(usable_cpus(), cfg.learner_threads, {
            e.name: e.n_threads for e in cfg.run.policy.engines if isinstance(e, TransformersEngineConfig)}),
        stages_s=job.stages_s, rollout_timings=await _rollout_timings(cfg),
        error=grpo.error, cluster=grpo.cluster,
        evaluation=job.evaluation.section() if job.evaluation is not None and grpo.may_evaluate else None)
    path = write_report(Path(cfg.report_dir), report)
    if job.tracking is not None:
        await asyncio.to_thread(job.tracking.heldout, report.evaluation)
    if grpo.crash is not None:
        raise grpo.crash
    if grpo.failure is not None:
        raise TrainError(f"the training run stopped: {grpo.failure}; the report, with this reason, is at {path}"
                         ) from grpo.failure
    return JobOutcome(path, grpo.learner_exitcode, report)


async def train(cfg: TrainConfig, *, console: Console | None = None, live: bool | None = None,
                progress_every_s: float | None = None) -> JobOutcome:
    """Runs a training job on this machine (:class:`~gymfleet.run.local.LocalPlacement`) until
    its budget is spent (or the learner dies) and writes its report.

    Args:
        cfg: the training run.
        console: where messages and progress go (default stderr).
        live: True: a rich live table; False: plain progress lines; None: live on a terminal.
        progress_every_s: seconds between plain progress lines (default 10).

    An adapter version the engines do not load (after ``adapter_load.attempts`` tries) is skipped
    and the run goes on (the report's ``adapter_load_failures``). A run that started but cannot go
    on (a GymfleetError: the store fails) still writes its report, with ``run_status: failed`` and
    ``error`` saying why. The report's ``no_learning`` says why no learner step was made (None
    when one was); ``evaluation`` holds the held-out scores when ``heldout.enabled``.

    Raises:
        TrainError: the run stopped on a GymfleetError (a task's env or instances, the policy,
            the store); the message names the cause and the report.
    """
    return await run_job(cfg, LocalPlacement(), console=console, live=live, progress_every_s=progress_every_s)


async def _rollout_timings(cfg: TrainConfig) -> list[dict[str, float]]:
    """Every stored rollout's timings of the run (for the report's ``wall_time``); [] when the
    store cannot be read (the report is written anyway)."""
    try:
        async with await TrajectoryStore.open(cfg.run.store) as store:
            rows = await store.trajectories(cfg.run.run_id, limit=None)
    except GymfleetError:
        return []
    return [r.trajectory.timings for r in rows]
