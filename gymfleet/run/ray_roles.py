"""The Ray actors of ``gymfleet train --cluster`` (:mod:`gymfleet.run.cluster` places them):
an orchestrator shard, an embedded inference replica, the learner, and the stages around GRPO
(warm start, held-out evaluation)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

from pydantic import JsonValue
from rich.console import Console

from gymfleet.core.errors import ConfigError
from gymfleet.orchestrator import RunConfig, TransformersEngineConfig, VLLMEngineConfig, RunOutcome
from gymfleet.run.collection import collect
from gymfleet.run.config import ClusterConfig, TrainConfig
from gymfleet.run.follow import BucketFollower
from gymfleet.run.heldout import HeldOutEvaluation, heldout_stage
from gymfleet.run.records import ReplicaStats, ShardResult
from gymfleet.run.warmstart import WarmStartOutcome, warm_start_if_new
from gymfleet.trainer import AdapterBucket, EndRow, WorkerArgs, last_row, learn


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


SERVED_MODEL = "base"
"""The base model's name on the replica actors (requests' ``model`` without an adapter)."""


class ReplicaRole:
    """A Ray actor: one embedded inference replica serving HTTP on its node's address
    (``gymfleet serve``'s app, :func:`~gymfleet.orchestrator.engines.server.build_app`).

    Adapters given as URLs are copied from the bucket into a folder of the replica's own, so the
    replica needs no file system shared with its shard. Listening starts in ``__init__`` (again
    after a restart); :meth:`address` says where once the server is up.
    """

    def __init__(self, engine: dict[str, JsonValue], port: int = 0) -> None:
        import ray
        import uvicorn

        from gymfleet.orchestrator import build_app, TransformersEngine

        config = TransformersEngineConfig.model_validate(engine)
        host = ray.util.get_node_ip_address()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        self._engine = TransformersEngine(config)
        cache = Path(tempfile.gettempdir()) / f"gymfleet-{config.name}-adapters-{sock.getsockname()[1]}"
        shutil.rmtree(cache, ignore_errors=True)  # what an earlier start on this port left
        app = build_app(self._engine, SERVED_MODEL, adapter_cache=cache)
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True,
                                        name=f"replica-{config.name}")
        self._thread.start()

    def address(self, timeout_s: float = 120.0) -> str:
        """The replica's base URL (``http://IP:PORT``), once it accepts requests.

        Raises:
            RuntimeError: the server stopped, or did not start within ``timeout_s`` seconds.
        """
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"replica {self.url} did not start")
            time.sleep(0.05)
        return self.url

    def stats(self) -> ReplicaStats:
        """What this replica did since its (re)start, and the adapters it holds now."""
        return ReplicaStats(self.url, self._engine.stats.n_generated_tokens, self._engine.stats.n_forward_passes,
                            sorted(self._engine.adapters))


def replica_engine(run: RunConfig, cl: ClusterConfig, index: int) -> dict[str, JsonValue]:
    """The engine config of replica actor ``index``: the run's first ``kind: transformers``
    engine (or the default one), named ``replica-<index>``, with ``cluster.replica_cpus`` threads
    unless it sets its own.

    Raises:
        ConfigError: ``policy.engines`` lists engines of another kind (vLLM replicas are not
            placed as actors: launch them per shard, or list running ones).
    """
    others = [e.kind for e in run.policy.engines if not isinstance(e, TransformersEngineConfig)]
    if others:
        raise ConfigError(f"cluster.replicas_per_shard places embedded replicas, but policy.engines lists "
                          f"{', '.join(sorted(set(others)))} engines: set cluster.replicas_per_shard: 0 (each "
                          "shard then uses policy.engines itself), or list only kind: transformers engines")
    engines = [e for e in run.policy.engines if isinstance(e, TransformersEngineConfig)]
    base = engines[0] if engines else TransformersEngineConfig(source=run.policy.model)
    return base.model_copy(update={"name": f"replica-{index}",
                                   "n_threads": base.n_threads or max(1, int(cl.replica_cpus))}).model_dump(mode="json")


def shard_policy_engines(urls: list[str], first: int) -> list[dict[str, JsonValue]]:
    """A shard's ``policy.engines`` when it uses replica actors: each URL as an HTTP replica
    (``kind: vllm``, the API gymfleet serve speaks) that copies adapters from the bucket itself."""
    return [VLLMEngineConfig(base_url=url, model=SERVED_MODEL, name=f"replica-{first + i}",
                             replica_reads_urls=True).model_dump(mode="json", exclude_defaults=True)
            | {"kind": "vllm"} for i, url in enumerate(urls)]


class LearnerRole:
    """A Ray actor: the run's learner (``gymfleet learn``'s loop). Threaded (``max_concurrency=2``)."""

    def __init__(self, args: WorkerArgs) -> None:
        self.args = args
        self._stop = threading.Event()

    def run(self) -> EndRow | None:
        """Trains until the budget or :meth:`stop`; returns the last ``end`` row of learner.jsonl."""
        Path(self.args.report_dir).mkdir(parents=True, exist_ok=True)
        asyncio.run(learn(self.args, self._stop, mp.Value("i", 0)))
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
