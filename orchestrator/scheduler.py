"""The scheduler: keeps the in-flight count at the cap, picks tasks by ratio, and survives stops.

One loop admits rollouts while there is a free slot, admission allows it (the staleness gate and,
in a training run, the ahead budget: :mod:`gymfleet.orchestrator.admission`) and some task is
eligible; each rollout runs as its own asyncio task and settles itself (store write, counters,
retry or quarantine) when it ends. Samples are claimed from the store in batches, leased to this
scheduler and renewed by a heartbeat, so that several schedulers (processes) can share one run
on PostgreSQL, each sample run by one of them. ``request_stop`` (Ctrl-C / SIGTERM) closes admission, then
in-flight rollouts finish or are aborted by the deadline; a second request aborts at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from gymfleet.core.records import RolloutStatus, SamplingParams, Trajectory
from gymfleet.orchestrator.admission import Admission, LearnerProgress
from gymfleet.orchestrator.claimer import SampleClaimer
from gymfleet.orchestrator.config import RunConfig
from gymfleet.orchestrator.metrics import MetricsWriter
from gymfleet.orchestrator.mix import TaskMix
from gymfleet.orchestrator.progress import RunStats, TaskStats
from gymfleet.orchestrator.protocols import PolicyGateway
from gymfleet.orchestrator.rollout import OUTAGE_METRIC, EnvFactory, Rollout, RolloutRequest
from gymfleet.orchestrator.store import SampleRef, TrajectoryStore
from gymfleet.orchestrator.store.errors import StoreWriteError
from gymfleet.orchestrator.store.schema import RunStatus
from gymfleet.orchestrator.workload import TaskWork

log = logging.getLogger(__name__)

STALENESS_POLL_S = 0.1


@dataclass
class RunOutcome:
    """How a run (this start of it) ended."""

    run_id: str
    status: RunStatus
    completed: int
    by_status: dict[str, int] = field(default_factory=dict)
    quarantined: dict[str, str] = field(default_factory=dict)
    n_requeued: int = 0
    n_aborted_on_restart: int = 0


class Scheduler:
    """Runs one run config to completion (or until stopped).

    Args:
        config: the run.
        store: where trajectories and the work queue live.
        gateway: the policy.
        env_factories: per task name, a callable that makes a fresh env.
        instance_ids: per task name, the instances to run.
        metrics: where snapshots go (None: nowhere).
        reload_config: called every ``metrics_interval_s``; weights and auto mode of the config it
            returns are applied live (None: weights change only through :meth:`set_weights`).
        make_rollout: builds each rollout from its request, env factory and gateway (default
            :class:`Rollout`; ``harness_rollout.HarnessRollouts`` for runs with harness tasks).
        admission: when rollouts may start and groups be created (default: the staleness gate
            of ``config.max_staleness``, no ahead budget).
    """

    def __init__(
        self,
        config: RunConfig,
        store: TrajectoryStore,
        gateway: PolicyGateway,
        env_factories: dict[str, EnvFactory],
        instance_ids: dict[str, list[str]],
        *,
        metrics: MetricsWriter | None = None,
        reload_config: Callable[[], RunConfig | None] | None = None,
        make_rollout: Callable[[RolloutRequest, EnvFactory, PolicyGateway], Rollout] | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.make_rollout = make_rollout or Rollout
        """Builds each rollout (``Rollout``; a run with harness tasks passes
        ``harness_rollout.HarnessRollouts``, which plays those through the HTTP gateway)."""
        self.config = config
        self.store = store
        self.gateway = gateway
        self.env_factories = env_factories
        self.instance_ids = instance_ids
        self.metrics = metrics
        self.reload_config = reload_config
        self.mix = TaskMix({t.name: t.weight for t in config.tasks}, config.auto_mix)
        self.stats = RunStats(config.run_id, {t.name: TaskStats(t.name, t.weight) for t in config.tasks})
        self.work: dict[str, TaskWork] = {}
        self.versions: Counter[int] = Counter()
        self.overhead_s = 0.0
        self.n_decisions = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._abort = asyncio.Event()
        self._stopping = False
        self._budget_spent = False
        self._fatal: Exception | None = None
        """What made the run stop at once (a store or metrics file that cannot be written)."""
        self.claimer = SampleClaimer(store, config)
        """Claims this scheduler's samples from the store and keeps them leased."""
        self.admission = admission or Admission(config.max_staleness)
        """When rollouts may start and groups be created (:mod:`gymfleet.orchestrator.admission`):
        the staleness gate, and in a training run the ahead budget fed by the learner's progress.
        Samples of groups already created are claimed and admitted whatever the budget."""

    # ---- control -------------------------------------------------------------------

    def request_stop(self, *, budget_spent: bool = False, abort: bool = False) -> None:
        """Stops admission (first call); aborts every in-flight rollout (second call).

        Args:
            budget_spent: the run stops because its budget is spent (the caller's training
                budget): it ends ``completed (budget)``, not ``interrupted``.
            abort: the caller ends the run itself (its learner is done): admission stops and
                the in-flight rollouts are aborted at once, without the Ctrl-C hints.
        """
        self._budget_spent = self._budget_spent or budget_spent
        if abort:
            if self._tasks:
                log.info("run ending: aborting %d in-flight rollouts", len(self._tasks))
            self._abort.set()
        elif self._stopping:
            log.warning("second stop request: aborting %d in-flight rollouts", len(self._tasks))
            self._abort.set()
        else:
            shutdown = self.config.shutdown
            log.warning(
                "stop requested: no new rollouts; the %d in flight %s within %g s (shutdown.mode %s); "
                "stop again (Ctrl-C) to abort them now",
                len(self._tasks), "finish" if shutdown.mode == "finish" else "are aborted",
                shutdown.deadline_s, shutdown.mode,
            )
        self._stopping = True
        self.stats.paused = "stopping"
        self._wake.set()

    def learner_progressed(self, progress: LearnerProgress) -> None:
        """Hands the learner's newest counters to admission (a training run calls it whenever it
        looks); groups it grants start at once, and one step's groups are granted when a
        quarantined task holds a spent budget (:meth:`Admission.unstarve`)."""
        now = time.monotonic()
        granted = self.admission.progressed(progress, now)
        granted += self.admission.unstarve(self.stats.in_flight, any(w.quarantined for w in self.work.values()), now)
        if granted:
            self._granted()

    def grant_groups(self, n_groups: int) -> None:
        """Lets ``n_groups`` more groups be created (turns the budget on if it was off)."""
        self.admission.grant(n_groups)
        self._granted()

    def _granted(self) -> None:
        for work in self.work.values():
            work.retry_at = 0.0
        self._wake.set()

    def _may_start(self, work: TaskWork) -> bool:
        return bool(work.pending) or self.admission.may_create(first_claim=not work.n_refills)

    def stuck_at_weight_zero(self) -> list[str]:
        """The tasks with work left when nothing is in flight and every one of them has weight 0
        (nothing can start until a weight is raised); empty otherwise."""
        if self.stats.in_flight:
            return []
        waiting = [name for name, w in self.work.items() if w.has_work()]
        if any(self.mix.weights.get(name, 0.0) > 0 for name in waiting):
            return []
        return waiting

    def set_weights(self, weights: dict[str, float]) -> None:
        """Changes task weights live (unknown names are ignored)."""
        known = {k: v for k, v in weights.items() if k in self.mix.weights}
        self.mix.set_weights({**self.mix.weights, **known})
        for name, weight in known.items():
            self.stats.tasks[name].weight = weight
        self._wake.set()

    # ---- the run ---------------------------------------------------------------------

    async def run(self) -> RunOutcome:
        """Resumes or starts the run and drives it until all work is done or a stop is requested.

        Raises:
            RunBusyError: a SQLite store, and another live orchestrator holds the run.
            StoreWriteError: the store cannot take any more writes (disk full, read-only); the
                run stopped at once, what was written is kept, rerunning resumes.
            OSError: the metrics file could not be written (same).
        """
        cfg = self.config
        resume = await self.store.start_run(cfg.run_id, cfg.model_dump(mode="json"), owner=self.claimer.owner,
                                            lease_s=cfg.lease_s)
        for t in cfg.tasks:
            self.work[t.name] = TaskWork(t, cfg.run_id, self.instance_ids[t.name], resume.group_ids)
        self._event("start", restarted=resume.restarted, requeued=len(resume.pending),
                    aborted_on_restart=resume.n_aborted, done_before=resume.n_done)
        ticker = asyncio.create_task(self._tick(), name="scheduler-tick")
        heartbeat = asyncio.create_task(self.claimer.heartbeat(), name="scheduler-heartbeat")
        try:
            await self._admit_loop()
            await self._drain()
        except BaseException:  # refused, crashed or cancelled: the run must not read `running` for ever
            await self._mark_interrupted()
            raise
        finally:
            ticker.cancel()
            heartbeat.cancel()
        await self.store.flush()  # a store that filled up may only say so now
        if self._fatal is None and self.store.fatal_error is None:
            await self.claimer.release()
        if self._fatal is None and self.store.fatal_error is not None:
            self._fatal = self.store.fatal_error
        if self._fatal is not None:  # the disk is full: what was written stays, a rerun resumes
            raise self._fatal
        status = self._final_status()
        await self.store.set_run_status(cfg.run_id, status)
        outcome = RunOutcome(
            cfg.run_id, status, self.stats.completed,
            dict(sum((t.by_status for t in self.stats.tasks.values()), Counter())),
            {n: w.quarantined for n, w in self.work.items() if w.quarantined},
            len(resume.pending), resume.n_aborted,
        )
        self._event("end", status=status.value, completed=outcome.completed, by_status=outcome.by_status,
                    quarantined=outcome.quarantined)
        return outcome

    async def _mark_interrupted(self) -> None:
        """Records the run as interrupted when it ends by an exception (best effort: a store
        that cannot be written any more keeps ``running``, and its error is the one raised)."""
        try:
            await self.store.set_run_status(self.config.run_id, RunStatus.interrupted)
        except Exception as exc:  # the original exception matters more than this one
            log.warning("could not mark run %s interrupted: %s", self.config.run_id, exc)

    def _final_status(self) -> RunStatus:
        if any(w.quarantined for w in self.work.values()):
            return RunStatus.interrupted
        if self._budget_spent:
            return RunStatus.completed_budget
        return RunStatus.interrupted if self._stopping else RunStatus.completed

    async def _admit_loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            if self._stale():
                self.stats.paused = "staleness"
                await self._wait(STALENESS_POLL_S)
                continue
            self.stats.paused = ""
            if self.stats.in_flight >= self.config.max_in_flight:
                if self.admission.max_staleness is None:
                    await self._wake.wait()
                else:  # a newly published adapter wakes no one: look again soon
                    await self._wait(STALENESS_POLL_S)
                continue
            t0 = time.perf_counter()
            now = time.monotonic()
            name = self.mix.pick(n for n, w in self.work.items() if w.eligible(now) and self._may_start(w))
            if name is None:
                self.overhead_s += time.perf_counter() - t0
                if not self.stats.in_flight and not any(w.has_work() for w in self.work.values()):
                    return
                await self._wait_for_work(now)
                continue
            if not self.work[name].pending:
                await self._refill(self.work[name])
                continue  # pick again: the mix may prefer another task now
            self._admit(self.work[name])
            self.overhead_s += time.perf_counter() - t0
            self.n_decisions += 1
            if self.n_decisions % 256 == 0:
                await asyncio.sleep(0)  # let rollouts start while a large cap fills

    async def _wait_for_work(self, now: float) -> None:
        """Until woken, or until a task that found the store empty may ask it again."""
        retry = [w.retry_at for w in self.work.values()
                 if w.has_work() and not w.pending and self._may_start(w)]
        if retry:
            await self._wait(max(0.0, min(retry) - now))
        else:
            await self._wake.wait()

    async def _refill(self, work: TaskWork) -> None:
        try:
            handed = await self.claimer.refill(work, self.admission.group_budget)
        except StoreWriteError as exc:  # the store is full: nothing more could be recorded
            self._stop_on(exc)
            return
        self.admission.created(handed)

    def _stale(self) -> bool:
        return self.admission.stale(self.gateway.policy_version, min(self.versions) if self.versions else None)

    async def _wait(self, timeout_s: float) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await self._wake.wait()
        except TimeoutError:
            pass

    def _admit(self, work: TaskWork) -> None:
        sample = work.take()
        rollout_id = f"{sample.sample_id}/a{sample.n_attempts + 1}"
        version = self.gateway.policy_version
        self.store.start_sample(sample.sample_id, rollout_id)
        self.versions[version] += 1
        work.in_flight += 1
        self.stats.started(work.name)
        cfg = work.cfg
        request = RolloutRequest(
            self.config.run_id, sample.group_id, rollout_id, cfg.registered_id, sample.instance_id,
            self._sampling(cfg.sampling),
            cfg.max_turns, cfg.turn_timeout_s, cfg.rollout_timeout_s,
        )
        rollout = self.make_rollout(request, self.env_factories[work.name], self.gateway)
        task = asyncio.create_task(self._run_one(work, sample, rollout, version), name=rollout_id)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _sampling(self, base: SamplingParams) -> SamplingParams:
        # The run's seed is the base: the gateway derives each turn's seed from it, the rollout id
        # and the turn index (gymfleet.core.sampling.turn_seed).
        # model_construct: the base was validated once; copying it per rollout was a hot spot.
        return SamplingParams.model_construct(**{**base.__dict__, "seed": self.config.seed})

    async def _run_one(self, work: TaskWork, sample: SampleRef, rollout: Rollout, version: int) -> None:
        try:
            traj = await rollout.run()
        except asyncio.CancelledError:
            traj = rollout.trajectory or Trajectory(
                rollout.request.rollout_id, self.config.run_id, sample.group_id, sample.env_id,
                sample.instance_id, status=RolloutStatus.aborted, reason="cancelled before it started")
            self._settle(work, sample, traj, version)
            raise
        except Exception as exc:  # a bug in rollout.py itself: record it rather than lose the sample
            log.exception("rollout %s crashed", rollout.request.rollout_id)
            traj = Trajectory(rollout.request.rollout_id, self.config.run_id, sample.group_id, sample.env_id,
                              sample.instance_id, status=RolloutStatus.infra_error,
                              reason=f"orchestrator bug: {type(exc).__name__}: {exc}")
        self._settle(work, sample, traj, version)

    def _settle(self, work: TaskWork, sample: SampleRef, traj: Trajectory, version: int) -> None:
        t0 = time.perf_counter()
        self.versions[version] -= 1
        if not self.versions[version]:
            del self.versions[version]
        work.in_flight -= 1
        status = traj.status
        retry = status is RolloutStatus.infra_error and work.may_retry(sample) and not self._stopping
        final = status is not RolloutStatus.aborted and not retry
        self.store.add(traj, sample_id=sample.sample_id, task=work.name, final=final, keep_lease=retry)
        if self.store.fatal_error is not None:
            self._stop_on(self.store.fatal_error)
        self.stats.finished(work.name, traj)
        # an outage (no replica live) is not the task's fault: retried, never counted
        if status is RolloutStatus.infra_error and not traj.metrics.get(OUTAGE_METRIC):
            work.consecutive_infra += 1
            if work.consecutive_infra >= self.config.quarantine_after and work.quarantined is None:
                self._quarantine(work, traj.reason)
        elif status not in (RolloutStatus.infra_error, RolloutStatus.aborted):
            work.consecutive_infra = 0
        if retry and work.quarantined is None:
            work.requeue(sample)
        if final:
            rewards = work.record_final(sample, traj.reward)
            if rewards is not None:
                self.mix.record_group(work.name, rewards)
        self._wake.set()
        self.overhead_s += time.perf_counter() - t0

    def _quarantine(self, work: TaskWork, last_reason: str) -> None:
        message = (
            f"task {work.name} quarantined after {work.consecutive_infra} consecutive infrastructure "
            f"failures; last: {last_reason}. Fix it and start the run again: its remaining samples are "
            "requeued on restart."
        )
        log.error(message)
        work.quarantine(message)
        self.stats.tasks[work.name].quarantined = message
        self.store.quarantine(self.config.run_id, work.name)
        self._event("quarantine", task=work.name, message=message)

    async def _drain(self) -> None:
        """After a stop: lets in-flight rollouts finish until the deadline, then aborts the rest."""
        if not self._tasks:
            return
        shutdown = self.config.shutdown
        if shutdown.mode == "finish":
            deadline = time.monotonic() + shutdown.deadline_s
            abort = asyncio.create_task(self._abort.wait())
            while self._tasks and not self._abort.is_set() and (left := deadline - time.monotonic()) > 0:
                await asyncio.wait({*self._tasks, abort}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            abort.cancel()
        pending = list(self._tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self._event("drained", aborted=len(pending))

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.config.metrics_interval_s)
            self.stats.policy_version = self.gateway.policy_version
            self._event("progress")
            if self.reload_config is not None:
                self._apply_reload()

    def _apply_reload(self) -> None:
        try:
            fresh = self.reload_config() if self.reload_config else None
        except Exception as exc:  # a half-saved or invalid edit: keep running on the old weights
            log.warning("config reload failed, keeping the current weights: %s", exc)
            return
        if fresh is None:
            return
        weights = {t.name: t.weight for t in fresh.tasks}
        if weights != self.mix.weights or fresh.auto_mix != self.mix.auto:
            self.mix.set_auto(fresh.auto_mix)
            self.set_weights(weights)
            self._event("weights", weights=weights, auto_mix=fresh.auto_mix.model_dump())

    def _event(self, event: str, **payload: object) -> None:
        if self.metrics is None or self._fatal is not None:
            return
        try:
            self.metrics.write(event, {**self.stats.snapshot(), **payload})
        except OSError as exc:  # the metrics file's disk is full or read-only: stop, keep what was stored
            self._stop_on(exc if exc.filename else OSError(exc.errno, exc.strerror, str(self.config.metrics_path)))

    def _stop_on(self, error: Exception) -> None:
        """Stops the run at once because ``error`` makes every further result unrecordable;
        :meth:`run` raises it once in-flight rollouts are aborted."""
        if self._fatal is not None:
            return
        self._fatal = error
        log.info("stopping the run at once, in-flight rollouts aborted: %s", error)
        self._stopping = True
        self._abort.set()  # what is in flight could not be recorded either
        self.stats.paused = "stopping"
        self._wake.set()
