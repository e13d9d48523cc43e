"""The Ray actors of ``gymfleet train --cluster`` (:mod:`gymfleet.run.cluster` places them):
an orchestrator shard, the learner, and the stages around GRPO (warm start, held-out
evaluation). The inference replica's actor is in :mod:`gymfleet.run.ray_replica`, the learner's
follower ranks' in :mod:`gymfleet.run.ray_learner`."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import os
import threading
from pathlib import Path

from pydantic import JsonValue
from rich.console import Console

from gymfleet.orchestrator import RunConfig, RunOutcome
from gymfleet.run.collection import collect
from gymfleet.run.config import TrainConfig
from gymfleet.run.follow import BucketFollower
from gymfleet.run.heldout import HeldOutEvaluation, heldout_stage
from gymfleet.run.records import ShardResult
from gymfleet.run.warmstart import WarmStartOutcome, warm_start_if_new
from gymfleet.trainer import AdapterBucket, EndRow, RankLauncher, RankLostError, WorkerArgs, last_row, learn

log = logging.getLogger(__name__)


class ShardRole:
    """A Ray actor: one orchestrator shard of the run (``collect`` following the bucket).

    A threaded actor (``max_concurrency=2``): :meth:`stop` is called while :meth:`run` runs.
    """

    def __init__(self, run: dict[str, JsonValue], bucket_url: str, index: int, local_dir: str,
                 fetch_remote: bool = True) -> None:
        self.config = RunConfig.model_validate(run)
        self.bucket_url = bucket_url
        self.index = index
        self.local_dir = Path(local_dir)
        self.fetch_remote = fetch_remote
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopped = threading.Event()

    def run(self) -> ShardResult:
        """Collects until :meth:`stop`; returns what it did."""
        return asyncio.run(_collect_shard(self))

    def stop(self) -> None:
        """Stops admission and aborts the rollouts in flight (they are requeued)."""
        self._stopped.set()
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)


async def _collect_shard(shard: ShardRole) -> ShardResult:
    """The shard's collection. A module function: a Ray actor class with an ``async def`` is an
    async actor, whose methods run on Ray's own event loop, and this one runs its own."""
    shard._loop, shard._stop = asyncio.get_running_loop(), asyncio.Event()
    if shard._stopped.is_set():
        shard._stop.set()
    follower = BucketFollower(AdapterBucket(shard.bucket_url, shard.config.run_id), shard.local_dir,
                              fetch_remote=shard.fetch_remote)
    outcome: RunOutcome = await collect(shard.config, follower=follower, stop=shard._stop)
    return ShardResult(shard.index, outcome.status.value, outcome.completed, dict(outcome.by_status),
                       list(follower.loads))


class LearnerRole:
    """A Ray actor: the run's learner (``gymfleet learn``'s loop), rank 0 when
    ``learner.world_size`` > 1, its follower ranks actors of their own
    (:class:`~gymfleet.run.ray_ranks.RayRanks`). Threaded (``max_concurrency=2``).

    Args:
        args: the learner's settings.
        ranks: how its follower ranks start (None: one rank, or spawned processes beside it).
        rank_retries: times the learner starts again, from the last published version, after a
            lost rank failed its step (``RankLostError``); one more loss fails the actor's call.
    """

    def __init__(self, args: WorkerArgs, ranks: RankLauncher | None = None, rank_retries: int = 0) -> None:
        self.args = args
        self.ranks = ranks
        self.rank_retries = rank_retries
        self._stop = threading.Event()

    def run(self) -> EndRow | None:
        """Trains until the budget or :meth:`stop`; returns the last ``end`` row of learner.jsonl.

        Raises:
            RankLostError: a rank was lost more than ``rank_retries`` times.
        """
        Path(self.args.report_dir).mkdir(parents=True, exist_ok=True)
        for attempt in range(self.rank_retries + 1):
            try:
                asyncio.run(learn(self.args, self._stop, mp.Value("i", 0), ranks=self.ranks))
                break
            except RankLostError as exc:
                if attempt == self.rank_retries or self._stop.is_set():
                    raise
                log.warning("learner rank lost (%s); starting the learner again from the last published version "
                            "(retry %d of %d)", exc, attempt + 1, self.rank_retries)
        return last_row(Path(self.args.report_dir), EndRow)

    def stop(self) -> None:
        self._stop.set()


class StageRole:
    """A Ray actor for one of the job's stages around GRPO (:class:`~gymfleet.run.cluster.RayPlacement`
    places it): the warm start, where the learner trains, or the held-out evaluation, where the
    shards play the tasks' envs. Each call returns its result and where it ran
    (``ray::StageRole`` pid PID on node NODE)."""

    def warm_start(self, cfg: TrainConfig) -> tuple[WarmStartOutcome | None, str]:
        """:func:`gymfleet.run.warmstart.warm_start_if_new` on this actor."""
        return asyncio.run(warm_start_if_new(cfg, Console(stderr=True))), self.where()

    def heldout(self, cfg: TrainConfig, base_only: bool,
                known: HeldOutEvaluation | None) -> tuple[HeldOutEvaluation, str]:
        """:func:`gymfleet.run.heldout.heldout_stage` on this actor."""
        return asyncio.run(heldout_stage(cfg, Console(stderr=True), base_only=base_only, known=known)), self.where()

    @staticmethod
    def where() -> str:
        import ray

        return f"ray::StageRole pid {os.getpid()} on node {ray.get_runtime_context().get_node_id()}"
