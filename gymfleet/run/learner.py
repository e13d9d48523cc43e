"""LearnerHandle: starts, watches and stops a run's learner wherever it runs.

The learner's loop is :func:`gymfleet.trainer.learn` everywhere; where it runs is the handle's
kind, which the job's stages never see:

* :class:`ProcessLearner`: a ``multiprocessing`` spawn child of this process (``gymfleet train``);
* :class:`ThreadLearner`: a thread of this process (``gymfleet learn``, the learner on its own);
* ``RayLearner`` (:mod:`gymfleet.run.ray_learner`): a Ray actor, one per data-parallel rank (``gymfleet train --cluster``).

Stopping is the same request everywhere: the learner finishes its step, publishes what it
trained and exits. Where the learner shares this machine the handle also counts its progress
(:meth:`LearnerHandle.progress`: steps that claimed groups, groups the refill asked for), which
the run hands on to the orchestrator's admission policy.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from multiprocessing.context import SpawnProcess
from contextlib import contextmanager

from gymfleet.orchestrator import LearnerProgress
from gymfleet.trainer import StepRow, WorkerArgs, learn, learner_process

EXIT_WAIT_S = 600.0
"""Seconds :meth:`LearnerHandle.wait` gives a stopped learner to publish and exit before it is killed."""
POLL_S = 0.2


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set for the block, then as it was (a spawned child takes
    this process's environment when it starts, and has no other way to be given one)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class LearnerHandle(ABC):
    """One run's learner: :meth:`start` it, :meth:`alive` says whether it runs, :meth:`stop`
    asks it to publish and exit, :meth:`wait` returns how it ended.

    Args:
        args: what the learner's loop needs (:meth:`gymfleet.run.config.TrainConfig.worker_args`).
    """

    def __init__(self, args: WorkerArgs) -> None:
        self.args = args
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._attempts = ctx.Value("i", 0)
        self._wanted = ctx.Value("i", 0)
        self.stop_requested = False

    def progress(self) -> LearnerProgress:
        """The learner's counters as admission takes them: steps that claimed groups, and groups
        its refills asked for beyond its steps' first claims (dynamic sampling)."""
        return LearnerProgress(steps=int(self._attempts.value), extra_groups=int(self._wanted.value))

    @abstractmethod
    def start(self) -> None:
        """Starts the learner (it resumes from the bucket)."""

    @abstractmethod
    def alive(self) -> bool:
        """True while the learner runs."""

    def stop(self) -> None:
        """Asks the learner to finish its step, publish what it trained and exit (idempotent)."""
        self.stop_requested = True
        self._stop.set()

    @abstractmethod
    async def wait(self, timeout_s: float = EXIT_WAIT_S) -> int | None:
        """Stops the learner and waits for it to end; one that has not ended after ``timeout_s``
        seconds is killed. Returns its exit code (0: it spent its budget; None: not known)."""

    async def run_out(self, max_wall_s: float | None, started: float | None = None) -> bool:
        """Waits until the learner ends, stopping it once ``max_wall_s`` seconds have passed
        since ``started`` (``time.monotonic()``, default now). Returns whether the wall budget
        stopped it."""
        t0 = time.monotonic() if started is None else started
        spent = False
        while self.alive():
            if max_wall_s is not None and not spent and time.monotonic() - t0 >= max_wall_s:
                self.stop()
                spent = True
            await asyncio.sleep(POLL_S)
        return spent


class ProcessLearner(LearnerHandle):
    """The learner in a spawned child process, so that training never blocks this event loop;
    it logs to ``learner.log`` in the report folder."""

    def __init__(self, args: WorkerArgs) -> None:
        super().__init__(args)
        self.proc: SpawnProcess | None = None

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        self.proc = ctx.Process(target=learner_process, args=(self.args, self._stop, self._attempts, self._wanted),
                                name="gymfleet-learner")
        # SIGINT blocked across the spawn: the child inherits the mask and ignores Ctrl-C from its
        # first instruction (trainer.worker._die_with_parent); a Ctrl-C meanwhile reaches this
        # process once unblocked (the run's stop handler), so none is lost.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            with _environment(self.args.environment):  # a spawned child copies it as it starts
                self.proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    async def wait(self, timeout_s: float = EXIT_WAIT_S) -> int | None:
        if self.proc is None:
            return None
        self._stop.set()
        await asyncio.to_thread(self.proc.join, timeout_s)
        if self.proc.is_alive():
            self.proc.kill()
            await asyncio.to_thread(self.proc.join)
        return self.proc.exitcode


class ThreadLearner(LearnerHandle):
    """The learner in a thread of this process (``gymfleet learn``: the process is the learner).

    Args:
        on_step: called with each step's row of ``learner.jsonl``.
    """

    def __init__(self, args: WorkerArgs, on_step: Callable[[StepRow], None] | None = None) -> None:
        super().__init__(args)
        self.on_step = on_step
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gymfleet-learner", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            asyncio.run(learn(self.args, self._stop, self._attempts, self._wanted, on_step=self.on_step))
        except BaseException as exc:  # re-raised by wait(), in the caller's thread
            self.error = exc

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def wait(self, timeout_s: float = EXIT_WAIT_S) -> int | None:
        """As :meth:`LearnerHandle.wait`; a thread cannot be killed, so it is waited for.

        Raises:
            Exception: what the learner's loop raised (a store or bucket that fails).
        """
        if self._thread is None:
            return None
        self._stop.set()
        await asyncio.to_thread(self._thread.join)
        if self.error is not None:
            raise self.error
        return 0
