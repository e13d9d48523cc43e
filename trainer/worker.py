"""The learner process: claims groups from the store, trains, publishes, logs each step as JSON.

Started by a :class:`gymfleet.run.learner.LearnerHandle` (a ``multiprocessing`` spawn child, a
thread, or a Ray actor), so that training never blocks the orchestrator's event loop. It shares four things with its parent: a stop event
(finish the step, publish what is pending, exit), a counter of steps attempted (sync mode waits
on it), a counter of groups a step asked for beyond its first claim (dynamic sampling's refill:
sync mode lets that many more groups start), and ``learner.jsonl`` in the report folder (one line per step, read by the report).

With ``learner.world_size`` > 1 this process is rank 0 of a data-parallel group
(:mod:`gymfleet.trainer.data_parallel`): it starts the other ranks (:func:`follower_process`)
through a ``RankLauncher`` (:class:`SpawnedRanks` on this machine, or Ray actors under ``train
--cluster``; ``learner.rank<N>.pid`` and ``learner.rank<N>.log`` in the report folder), claims,
deals each step's batch to them, publishes and acks. A rank lost mid-step fails the step and
this process (``RankLostError``) before anything it trained is published.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gymfleet.trainer.data_parallel import FollowerRank, RankGroup, RankLauncher, RankSpec
    from gymfleet.trainer.learner import Learner, LearnerConfig
    from gymfleet.trainer.rollout_policy import RolloutPolicy

from gymfleet.core.errors import GymfleetError
from gymfleet.trainer.errors import RankLostError
from gymfleet.core.jsonl import open_for_append
from gymfleet.trainer.step_log import (
    STEPS_FILE, EndRow, ErrorRow, FinalPublishRow, StartRow, StepRow, decode, read_log, write_row)
from gymfleet.core.quiet import quiet_if_asked

PID_FILE = "learner.pid"
POLL_S = 0.2


@dataclass(frozen=True)
class WorkerArgs:
    """What the learner process needs (picklable: it crosses the spawn)."""

    learner: LearnerConfig
    """The learner's settings (a pydantic model: it pickles across the spawn)."""
    policy: RolloutPolicy
    """What the rollouts were sampled from (the run's model, sampling and staleness bound)."""
    store_url: str
    run_id: str
    bucket_url: str
    report_dir: str
    max_steps: int | None
    min_groups: int
    """Claims smaller than this are released (sync mode: a whole step's worth)."""
    n_threads: int | None = None
    """torch intra-op threads of this process (None: torch's default, every core)."""
    environment: dict[str, str] = field(default_factory=dict)
    """Variables set in the learner process's environment before it starts (a spawned process
    only: they must be there before torch loads OpenMP), e.g. ``OMP_WAIT_POLICY``."""


def learner_process(args: WorkerArgs, stop: Any, attempts: Any, wanted: Any = None) -> None:
    """Process entry point (``multiprocessing.Process(target=...)``).

    Args:
        args: the settings.
        stop: a ``multiprocessing.Event``; once set, the learner publishes and exits.
        attempts: a ``multiprocessing.Value('i')`` counting run_step calls that claimed groups.
        wanted: a ``multiprocessing.Value('i')`` counting groups the refill asked for (None: not shared).
    """
    owner = _die_with_parent()
    quiet_if_asked()  # the parent's third-party noise settings (gymfleet --verbose or not)
    report = Path(args.report_dir)
    report.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=report / "learner.log", level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    (report / PID_FILE).write_text(str(os.getpid()))
    try:
        asyncio.run(learn(args, _OwnedStop(stop, owner), attempts, wanted))
    except BaseException as exc:
        if isinstance(exc, GymfleetError) and not isinstance(exc, RankLostError):
            _refuse(report, exc)  # the user's to fix (another live learner, a bucket, a store): no traceback
        # a lost rank (resumable: a rerun resumes from the last published version) or a bug
        logging.getLogger(__name__).exception("the learner failed")  # learner.log says why, not only stderr
        raise


def _refuse(report: Path, exc: GymfleetError) -> None:
    """Writes the learner's one-line ``error`` row and log line, then exits ``EXIT_REFUSED``."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    logging.getLogger("gymfleet.trainer.worker").error("learner stopped: %s", message)
    with open_for_append(report / STEPS_FILE) as out:
        write_row(out, ErrorRow(time.time(), message))
    sys.exit(EXIT_REFUSED)


EXIT_REFUSED = 2
"""The learner process's exit status when it stops on a GymfleetError (its ``error`` row in
``learner.jsonl`` says why); rerunning does not help until that is fixed."""


PR_SET_PDEATHSIG = 1
"""``prctl`` option (linux/prctl.h): the signal this process gets when its parent thread exits."""


def _die_with_parent() -> int | None:
    """Ties this learner process to the run that spawned it; returns the parent's pid.

    * Ctrl-C reaches every process of the terminal's process group: the learner ignores SIGINT
      (the parent was started with it blocked, :meth:`gymfleet.run.learner.ProcessLearner.start`)
      and stops when its parent sets the stop event, after its step's row.
    * A parent killed outright (SIGKILL) cannot set that event: on Linux the kernel then sends
      this process SIGKILL (``PR_SET_PDEATHSIG``), so no orphan keeps training or renewing the
      run's seat. The bucket commits by marker and claims lapse, so nothing is lost.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    parent = mp.parent_process()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is None:
        return None
    if os.getppid() != parent.pid:  # the parent died before the prctl: nothing would signal us
        os._exit(1)
    return parent.pid


class _OwnedStop:
    """The stop event, also set once the process that owns this learner is gone (the seat's
    renewal, each claim, checks it first): the owner check where ``PR_SET_PDEATHSIG`` is missing.

    Args:
        stop: the parent's ``multiprocessing.Event``.
        owner: the parent's pid (None: no parent to watch).
    """

    def __init__(self, stop: Any, owner: int | None) -> None:
        self.stop, self.owner = stop, owner

    def is_set(self) -> bool:
        if self.owner is not None and os.getppid() != self.owner:
            return True
        return bool(self.stop.is_set())


def _counter(value: Any) -> Any:
    """A callback adding its argument to a shared ``multiprocessing.Value`` (None: no callback)."""
    if value is None:
        return None

    def add(n: int) -> None:
        with value.get_lock():
            value.value += n
    return add


class SpawnedRanks:
    """Follower ranks as spawned processes on this machine (``learner.rank<N>.pid`` in the
    report folder)."""

    def master_addr(self) -> str:
        return "127.0.0.1"

    def start(self, args: WorkerArgs, spec: RankSpec) -> list[FollowerRank]:
        ctx = mp.get_context("spawn")
        followers: list[FollowerRank] = []
        for rank in range(1, spec.world_size):
            proc = ctx.Process(target=follower_process, args=(args, replace(spec, rank=rank)),
                               name=f"gymfleet-learner-rank{rank}")
            proc.start()
            (Path(args.report_dir) / f"learner.rank{rank}.pid").write_text(str(proc.pid))
            followers.append(proc)
        return followers


async def learn(args: WorkerArgs, stop: Any, attempts: Any, wanted: Any = None,
                on_step: Callable[[StepRow], None] | None = None, ranks: RankLauncher | None = None) -> None:
    """The learner's loop: resumes from the bucket, then claims, trains and publishes until
    ``args.max_steps`` or ``stop``; every step is a line of ``learner.jsonl``. Sets this
    process's torch threads to ``args.n_threads`` first (when given).

    Args:
        stop: anything with ``is_set()`` (a ``multiprocessing.Event`` or ``threading.Event``).
        attempts: a ``multiprocessing.Value('i')`` counting steps that claimed groups.
        wanted: a ``multiprocessing.Value('i')`` counting groups the refill asked for (None: not shared).
        on_step: called with each step's row (what ``learner.jsonl`` gets).
        ranks: how the follower ranks start when ``learner.world_size`` > 1 (None:
            :class:`SpawnedRanks`).

    Raises:
        RankLostError: a rank was lost: the step failed, nothing of it was published, and the
            run's seat was given up, so a new ``learn`` (here or in a rerun) resumes at once.
        BucketError: nothing committed in the bucket loads (see :meth:`Learner.resume`).
        StoreError: the store cannot be opened or read.
    """
    from gymfleet.orchestrator.store import TrajectoryStore
    from gymfleet.orchestrator.store.claims import new_learner_id
    from gymfleet.trainer.bucket import AdapterBucket
    from gymfleet.trainer.learner import Learner
    from gymfleet.trainer.source import StoreGroupSource

    if args.n_threads:
        import torch

        torch.set_num_threads(args.n_threads)
    config = args.learner
    async with await TrajectoryStore.open(args.store_url) as store:
        source = StoreGroupSource(store, args.run_id, min_groups=args.min_groups)
        claimer = new_learner_id()  # its own identity: a second learner on the run is refused
        released = await source.take_seat(claimer, config.claim_lease_s)
        learner = Learner(config, args.policy, source, AdapterBucket(args.bucket_url, args.run_id), claimer=claimer,
                          on_refill=_counter(wanted), should_stop=stop.is_set)
        resumed = await learner.resume()
        try:
            group, followers = _start_ranks(args, learner, ranks or SpawnedRanks()) if config.world_size > 1 \
                else (None, [])
            try:
                await _loop(args, learner, source, resumed, released, stop, attempts, on_step)
            finally:
                _stop_ranks(group, followers)
        except RankLostError:
            await source.leave_seat()  # rank 0 lives on and stops training: the next learner need not wait
            raise
        await source.leave_seat()  # a successor on another host need not wait out the seat


async def _loop(args: WorkerArgs, learner: Learner, source: Any, resumed: bool, released: int, stop: Any,
                attempts: Any, on_step: Callable[[StepRow], None] | None) -> None:
    """Claims, trains and publishes until the budget or ``stop``, writing ``learner.jsonl``."""
    log = logging.getLogger("gymfleet.trainer.worker")
    log.info("learner up: resumed=%s step=%d version=%d released=%d", resumed, learner.step,
             learner.version, released)
    steps_path = Path(args.report_dir) / STEPS_FILE
    missing = _missing_step_row(steps_path, learner.resumed_step_row)
    with open_for_append(steps_path) as out:
        if missing is not None:  # the last start was killed between its publish and this row
            write_row(out, missing)
        write_row(out, StartRow(time.time(), learner.step, learner.version, resumed, released, _torch_threads(),
                                os.environ.get("OMP_WAIT_POLICY"), str(learner.device), args.learner.world_size))
        idle_s = 0.0
        while not stop.is_set() and (args.max_steps is None or learner.step < args.max_steps):
            t0 = time.monotonic()
            metrics = await learner.run_step()
            if metrics is None:
                await asyncio.sleep(POLL_S)
                idle_s += time.monotonic() - t0
                continue
            with attempts.get_lock():
                attempts.value += 1
            row = StepRow(**vars(metrics), t=time.time(), idle_s=idle_s, version=learner.version,
                          claimed=len(source.claimed))
            write_row(out, row)
            if on_step is not None:
                on_step(row)
            idle_s = 0.0
        if learner.pending_group_ids:
            version = await learner.publish()
            write_row(out, FinalPublishRow(time.time(), version, learner.step))
        write_row(out, EndRow(time.time(), learner.step, learner.version, idle_s))


def _start_ranks(args: WorkerArgs, learner: Learner, launcher: RankLauncher) -> tuple[RankGroup, list[FollowerRank]]:
    """Starts ranks 1..world_size-1 through ``launcher`` and joins them as rank 0 (after the
    resume: they get its weights, optimiser state and step).

    Raises:
        RankLostError: the ranks did not all join within ``learner.dist_timeout_s``.
    """
    from gymfleet.trainer.data_parallel import RankGroup, RankSpec, free_port, resolve_backend

    config = args.learner
    host = launcher.master_addr()
    spec = RankSpec(0, config.world_size, host, free_port(host), resolve_backend(config.dist_backend, learner.device),
                    config.dist_timeout_s)
    followers = launcher.start(args, spec)
    try:
        ranks = RankGroup(spec)
    except BaseException:
        for follower in followers:
            follower.kill()
        raise
    try:
        learner.join_ranks(ranks)
    except BaseException:
        _stop_ranks(ranks, followers)
        raise
    return ranks, followers


def _stop_ranks(ranks: RankGroup | None, followers: list[FollowerRank]) -> None:
    """Tells the follower ranks to exit (when the group still answers), waits a little, kills
    what is left and leaves the group."""
    from gymfleet.trainer.errors import RankLostError

    if ranks is None:
        return
    if all(f.is_alive() for f in followers):
        try:
            ranks.broadcast(None)  # the followers' loop ends on None
        except RankLostError:
            pass
    for proc in followers:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join()
    ranks.close()


def follower_process(args: WorkerArgs, spec: RankSpec) -> None:
    """Process entry point of data-parallel rank ``spec.rank`` (> 0): loads the model, joins the
    group (rank 0's weights, optimiser state and step reach it), then trains its share of every
    batch rank 0 broadcasts until rank 0 sends None. It never touches the store or the bucket.

    Raises:
        RankLostError: rank 0 or another rank is gone.
    """
    quiet_if_asked()
    report = Path(args.report_dir)
    logging.basicConfig(filename=report / f"learner.rank{spec.rank}.log", level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    import torch

    from gymfleet.trainer.bucket import AdapterBucket
    from gymfleet.trainer.data_parallel import NoGroupSource, RankGroup
    from gymfleet.trainer.learner import Learner

    if args.n_threads:
        torch.set_num_threads(args.n_threads)
    config = args.learner
    if spec.backend == "nccl" and config.device in ("auto", "cuda"):
        # one GPU per rank: rank r's on one machine; the only one a Ray actor sees (Ray sets CUDA_VISIBLE_DEVICES)
        config = config.model_copy(update={"device": f"cuda:{spec.rank % max(1, torch.cuda.device_count())}"})
    learner = Learner(config, args.policy, NoGroupSource(), AdapterBucket(args.bucket_url, args.run_id),
                      claimer=f"rank-{spec.rank}")
    ranks = RankGroup(spec)
    try:
        learner.join_ranks(ranks)
        while (batch := ranks.broadcast(None)) is not None:
            metrics = learner.train_batch(batch)
            logging.getLogger(__name__).info("rank %d: step %d", spec.rank, metrics.step)
    finally:
        ranks.close()


def _missing_step_row(path: Path, row: dict[str, Any] | None) -> StepRow | None:
    """The ``learner.jsonl`` step row to write for the resumed version's step (from its
    meta.json's ``step_row``, marked ``recovered``) when the file has no row for that step; else None."""
    if row is None:
        return None
    if row["step"] in {r.step for r in read_log(path.parent) if isinstance(r, StepRow)}:
        return None
    recovered = decode({**row, "event": "step", "idle_s": 0.0, "version": row["published_version"], "claimed": 0,
                        "recovered": True})
    assert isinstance(recovered, StepRow)
    return recovered


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()
