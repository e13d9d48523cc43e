"""`gymfleet train CONFIG --cluster ADDRESS`: the run's roles placed on a Ray cluster as actors.

* **Orchestrator shards** (``cluster.shards`` of them): each a ``collect`` of the run (its own
  env resources, its own replicas as ``policy.engines`` says, following the bucket), on nodes that
  offer ``cluster.shard_resources`` (custom resources such as ``{sandbox: 1}``; a node says what
  it offers with ``ray start --resources='{"sandbox": 1}'``).
* **Inference replicas** (``cluster.replicas_per_shard`` per shard; 0: none, each shard runs
  ``policy.engines`` itself): embedded replicas (``gymfleet serve``'s app) on nodes offering
  ``cluster.replica_resources`` (and ``cluster.replica_gpus`` GPUs), each serving one shard's
  router over HTTP; they copy each adapter version from the bucket themselves.
* **The learner**: ``gymfleet learn``'s loop, on a node offering ``cluster.learner_resources``
  (and ``cluster.learner_gpus`` GPUs).

Ray restarts an actor whose process or node dies (``max_restarts``) and retries its ``run`` call
(``max_task_retries``): a restarted shard or learner resumes from the store and the bucket as a
restarted process does. The store and the bucket join them, so both must be reachable from every
node: a local bucket path or SQLite file is refused when the cluster spans several hosts.

Ray is an optional extra (``pip install 'gymfleet[ray]'``); gymfleet never manages the cluster.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from gymfleet.core.errors import ConfigError
from gymfleet.orchestrator.config import RunConfig
from gymfleet.orchestrator.engines.config import TransformersEngineConfig
from gymfleet.orchestrator.engines.vllm import VLLMEngineConfig
from gymfleet.orchestrator.scheduler import RunOutcome
from gymfleet.run.collection import collect
from gymfleet.run.config import ClusterConfig
from gymfleet.run.follow import BucketFollower
from gymfleet.run.report import GenerationTimeline, build_report, last_event, write_report

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardResult:
    """What one shard did (this start)."""

    index: int
    status: str
    completed: int
    by_status: dict[str, int]
    loads: list[dict[str, float]]


class ShardRole:
    """A Ray actor: one orchestrator shard of the run (``collect`` following the bucket).

    A threaded actor (``max_concurrency=2``): :meth:`stop` is called while :meth:`run` runs.
    """

    def __init__(self, run: dict[str, Any], bucket_url: str, index: int, local_dir: str,
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
    from gymfleet.trainer import AdapterBucket

    shard._loop, shard._stop = asyncio.get_running_loop(), asyncio.Event()
    if shard._stopped.is_set():
        shard._stop.set()
    follower = BucketFollower(AdapterBucket(shard.bucket_url, shard.config.run_id), shard.local_dir,
                              fetch_remote=shard.fetch_remote)
    outcome: RunOutcome = await collect(shard.config, follower=follower, stop=shard._stop)
    return ShardResult(shard.index, outcome.status.value, outcome.completed, dict(outcome.by_status),
                       [{"t": ld.t, "version": ld.version, "load_s": ld.load_s} for ld in follower.loads])


SERVED_MODEL = "base"
"""The base model's name on the replica actors (requests' ``model`` without an adapter)."""


class ReplicaRole:
    """A Ray actor: one embedded inference replica serving HTTP on its node's address
    (``gymfleet serve``'s app, :func:`~gymfleet.orchestrator.engines.server.build_app`).

    Adapters given as URLs are copied from the bucket into a folder of the replica's own, so the
    replica needs no file system shared with its shard. Listening starts in ``__init__`` (again
    after a restart); :meth:`address` says where once the server is up.
    """

    def __init__(self, engine: dict[str, Any], port: int = 0) -> None:
        import ray
        import uvicorn

        from gymfleet.orchestrator.engines.server import build_app
        from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine

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

    def stats(self) -> dict[str, Any]:
        """What this replica did since its (re)start: ``url``, ``generated_tokens``,
        ``forward_passes`` and the adapters it holds now (``adapters``, names)."""
        return {"url": self.url, "generated_tokens": self._engine.stats.n_generated_tokens,
                "forward_passes": self._engine.stats.n_forward_passes, "adapters": sorted(self._engine.adapters)}


def replica_engine(run: RunConfig, cl: ClusterConfig, index: int) -> dict[str, Any]:
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


def shard_policy_engines(urls: list[str], first: int) -> list[dict[str, Any]]:
    """A shard's ``policy.engines`` when it uses replica actors: each URL as an HTTP replica
    (``kind: vllm``, the API gymfleet serve speaks) that copies adapters from the bucket itself."""
    return [VLLMEngineConfig(base_url=url, model=SERVED_MODEL, name=f"replica-{first + i}",
                             replica_reads_urls=True).model_dump(mode="json", exclude_defaults=True)
            | {"kind": "vllm"} for i, url in enumerate(urls)]


class LearnerRole:
    """A Ray actor: the run's learner (``gymfleet learn``'s loop). Threaded (``max_concurrency=2``)."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self._stop = threading.Event()

    def run(self) -> dict[str, Any]:
        """Trains until the budget or :meth:`stop`; returns the last ``end`` event of learner.jsonl."""
        from gymfleet.trainer import learn

        Path(self.args.report_dir).mkdir(parents=True, exist_ok=True)
        asyncio.run(learn(self.args, self._stop, mp.Value("i", 0)))
        return last_event(Path(self.args.report_dir), "end")

    def stop(self) -> None:
        self._stop.set()


def check_reachable(store: str, bucket: str, hosts: set[str]) -> None:
    """Refuses a store or bucket that only one host can see when the cluster spans several.

    Raises:
        ConfigError: a local bucket path or a SQLite store on a cluster of several hosts.
    """
    if len(hosts) <= 1:
        return
    if "://" not in bucket:
        raise ConfigError(f"bucket {bucket!r} is a local path, but the cluster spans {len(hosts)} hosts: give "
                          "an fsspec URL every node reaches (s3://..., gs://...), or file:///PATH for a shared "
                          "file system mounted at PATH on every node")
    if store.startswith("sqlite") or "://" not in store:
        raise ConfigError(f"store {store!r} is a SQLite file, but the cluster spans {len(hosts)} hosts: give a "
                          "PostgreSQL URL (postgresql+asyncpg://user:password@host/db)")


def check_resources(offered: dict[str, float], cl: ClusterConfig) -> None:
    """Refuses roles whose resources no node offers (Ray would leave them pending for ever).

    Args:
        offered: the cluster's total resources (``ray.cluster_resources()``).

    Raises:
        ConfigError: a role asks for a resource the cluster lacks, naming the ``ray start`` flag.
    """
    asks = {"shard": (cl.shard_resources, cl.shard_cpus, 0.0),
            "learner": (cl.learner_resources, cl.learner_cpus, cl.learner_gpus)}
    if cl.replicas_per_shard:
        asks["replica"] = (cl.replica_resources, cl.replica_cpus, cl.replica_gpus)
    for role, (custom, cpus, gpus) in asks.items():
        for name, amount in {**custom, "CPU": cpus, "GPU": gpus}.items():
            if amount and offered.get(name, 0.0) < amount:
                flag = {"CPU": "--num-cpus", "GPU": "--num-gpus"}.get(name, f"--resources='{{\"{name}\": {amount:g}}}'")
                raise ConfigError(f"each {role} asks for {amount:g} {name}, but the cluster offers "
                                  f"{offered.get(name, 0.0):g}: start a node with `ray start ... {flag}`, or change "
                                  f"cluster.{role}_resources / {role}_cpus / {role}_gpus")


def train_on_cluster(cfg: Any, address: str, console: Console | None = None) -> dict[str, Any]:
    """Runs training config ``cfg`` on the Ray cluster at ``address`` until the learner's budget is
    spent; writes and returns the report (``report_dir``/report.json).

    Args:
        cfg: a :class:`~gymfleet.run.config.TrainConfig` (async mode).
        address: ``auto`` (the cluster this machine is part of) or ``ray://HOST:PORT``, or the
            address ``ray.init`` takes.

    Raises:
        ConfigError: Ray is not installed, sync mode, a store/bucket the nodes cannot share, a
            role asking for resources no node offers, or replica actors that did not start.
        TrainError: the learner failed for good (after its restarts).
    """
    try:
        import ray
    except ImportError:
        raise ConfigError("--cluster needs Ray: pip install 'gymfleet[ray]'") from None
    from gymfleet.core.errors import TrainError

    console = console or Console(stderr=True)
    if cfg.mode != "async":
        raise ConfigError("--cluster runs mode: async only (the lock-step baseline is a one-machine run)")
    from gymfleet.run.warmstart import warm_start_if_new

    asyncio.run(warm_start_if_new(cfg, console))  # warmstart.enabled on a new run: v1, here, first
    started_at, t0 = time.time(), time.monotonic()
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    hosts = {n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}
    check_reachable(cfg.run.store, cfg.bucket, hosts)
    cl: ClusterConfig = cfg.cluster
    run = cfg.run.model_copy(update={"shutdown": cfg.run.shutdown.model_copy(update={"mode": "abort"})})
    args = cfg.worker_args(report_dir=str(Path(cfg.report_dir).resolve()))
    check_resources(ray.cluster_resources(), cl)
    restarts = {"max_restarts": cl.max_restarts, "max_task_retries": -1, "max_concurrency": 2}
    replicas, shard_runs_cfg = _place_replicas(ray, run, cl, restarts)
    learner = ray.remote(LearnerRole).options(
        name=f"gymfleet-learner-{run.run_id}", num_cpus=cl.learner_cpus, num_gpus=cl.learner_gpus,
        resources=cl.learner_resources, **restarts).remote(args)
    local_dir = str(Path(cfg.report_dir).resolve() / "adapters")
    shards = [ray.remote(ShardRole).options(
        name=f"gymfleet-shard-{run.run_id}-{i}", num_cpus=cl.shard_cpus, resources=cl.shard_resources,
        **restarts).remote(shard_runs_cfg[i], cfg.bucket, i, local_dir, fetch_remote=not replicas)
        for i in range(cl.shards)]
    console.print(f"run {run.run_id} on Ray ({len(hosts)} host(s), {len(ray.nodes())} node(s)): "
                  f"{cl.shards} shard(s), {len(replicas)} replica actor(s), 1 learner", markup=False, highlight=False)
    shard_runs = [s.run.remote() for s in shards]
    learner_run = learner.run.remote()
    end: dict[str, Any] = {}
    wall_spent = False
    try:
        end, wall_spent = _wait_learner(ray, learner_run, cfg.budget.max_wall_s, learner, t0)
    except ray.exceptions.RayError as exc:
        raise TrainError(f"the learner failed after {cl.max_restarts} restarts: {exc}") from exc
    finally:
        results = _stop_shards(ray, shards, shard_runs, cl.stop_wait_s)
        replica_stats = _replica_stats(ray, replicas)
        for actor in [*shards, *replicas, learner]:
            ray.kill(actor, no_restart=True)
        swept = _sweep_nodes(ray, run.run_id)
    timeline = GenerationTimeline(started_at=started_at, wall_s=time.monotonic() - t0)
    report = build_report(Path(cfg.report_dir), "async", timeline, run.run_id)
    report["cluster"] = {"address": address, "hosts": sorted(hosts), "shards": [r.__dict__ for r in results],
                         "learner_end": end, "sandboxes_swept": swept, "replicas": replica_stats}
    report["budget"] = cfg.budget.model_dump(mode="json")
    spent = wall_spent or (cfg.budget.max_steps is not None and end.get("step") == cfg.budget.max_steps)
    report["run_status"] = "completed_budget" if spent else "interrupted"
    if cfg.heldout.enabled:  # on the launcher, as `gymfleet eval heldout` would
        from gymfleet.run.job import evaluate_end

        report["evaluation"] = asyncio.run(evaluate_end(cfg, console)).as_dict()
    from gymfleet.run.verdict import no_learning_reason

    report["no_learning"] = no_learning_reason(report)
    write_report(Path(cfg.report_dir), report)
    return report


def _place_replicas(ray: Any, run: RunConfig, cl: ClusterConfig,
                    restarts: dict[str, Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """Starts ``cl.replicas_per_shard`` replica actors per shard and waits until they serve;
    returns them and each shard's run config (its ``policy.engines`` the replicas' URLs when
    there are replicas, else the run's own)."""
    if not cl.replicas_per_shard:
        return [], [run.model_dump(mode="json")] * cl.shards
    n = cl.shards * cl.replicas_per_shard
    replicas = [ray.remote(ReplicaRole).options(
        name=f"gymfleet-replica-{run.run_id}-{j}", num_cpus=cl.replica_cpus, num_gpus=cl.replica_gpus,
        resources=cl.replica_resources, max_restarts=restarts["max_restarts"], max_task_retries=-1).remote(
        replica_engine(run, cl, j), cl.replica_port + j if cl.replica_port else 0) for j in range(n)]
    try:
        urls = ray.get([r.address.remote() for r in replicas], timeout=600)
    except (ray.exceptions.RayError, RuntimeError) as exc:
        for replica in replicas:
            ray.kill(replica, no_restart=True)
        raise ConfigError(f"the replica actors did not start within 600 s: {exc}") from exc
    configs = []
    for i in range(cl.shards):
        first = i * cl.replicas_per_shard
        policy = run.policy.model_dump(mode="json") | {
            "engines": shard_policy_engines(urls[first:first + cl.replicas_per_shard], first)}
        configs.append(run.model_dump(mode="json") | {"policy": policy})
    return replicas, configs


def _wait_learner(ray: Any, learner_run: Any, max_wall_s: float | None, learner: Any,
                  t0: float) -> tuple[dict[str, Any], bool]:
    """Waits for the learner's run to end (its step budget), stopping it once ``max_wall_s`` is
    spent. Returns the learner's last ``end`` event and whether the wall budget stopped it."""
    stop_sent = False
    while True:
        done, _ = ray.wait([learner_run], timeout=1.0)
        if done:
            return ray.get(learner_run), stop_sent
        if max_wall_s is not None and time.monotonic() - t0 > max_wall_s and not stop_sent:
            learner.stop.remote()  # it finishes its step and publishes what it trained
            stop_sent = True


def _stop_shards(ray: Any, shards: list[Any], shard_runs: list[Any], wait_s: float) -> list[ShardResult]:
    """Asks every shard to stop and collects what each did; a shard that is gone (its node
    died, not restarted) or does not stop in time is left out."""
    for s in shards:
        s.stop.remote()
    ready, _ = ray.wait(shard_runs, num_returns=len(shard_runs), timeout=wait_s)
    results = []
    for ref in ready:
        try:
            results.append(ray.get(ref))
        except ray.exceptions.RayError as exc:
            log.warning("a shard ended with an error: %s", exc)
    return results


def _replica_stats(ray: Any, replicas: list[Any]) -> list[dict[str, Any]]:
    """Each live replica's :meth:`ReplicaRole.stats` (one that is gone is left out)."""
    stats = []
    for replica in replicas:
        try:
            stats.append(ray.get(replica.stats.remote(), timeout=30))
        except ray.exceptions.RayError as exc:
            log.warning("a replica did not answer: %s", exc)
    return stats


def _sweep_sandboxes(run_id: str) -> int:
    """Runs on one node: removes the run's sandboxes there whose owner is gone (a shard killed
    with its node's processes leaves its local sandboxes' folders and its containers)."""
    from gymfleet.envs.sandbox import sweep

    return sum(r.removed for r in asyncio.run(sweep(run_id=run_id)))


def _sweep_nodes(ray: Any, run_id: str) -> dict[str, int]:
    """Sweeps every live node for the run's orphaned sandboxes; per node id, how many went."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(_sweep_sandboxes)
    refs = {n["NodeID"]: task.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote(run_id) for n in ray.nodes() if n.get("Alive")}
    swept = {}
    for node, ref in refs.items():
        try:
            swept[node] = ray.get(ref, timeout=120)
        except ray.exceptions.RayError as exc:
            log.warning("could not sweep node %s for sandboxes: %s", node, exc)
    return swept

