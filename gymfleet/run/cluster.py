"""`gymfleet train CONFIG --cluster ADDRESS`: the run's roles placed on a Ray cluster as actors.

* **Orchestrator shards** (``cluster.shards`` of them): each a ``collect`` of the run (its own
  env resources, its own replicas as ``policy.engines`` says, following the bucket), on nodes that
  offer ``cluster.shard_resources`` (custom resources such as ``{sandbox: 1}``; a node says what
  it offers with ``ray start --resources='{"sandbox": 1}'``).
* **Inference replicas** (``cluster.replicas_per_shard`` per shard; 0: none, each shard runs
  ``policy.engines`` itself): embedded replicas (``gymfleet serve``'s app) on nodes offering
  ``cluster.replica_resources`` (and ``cluster.replica_gpus`` GPUs), each serving one shard's
  router over HTTP; they copy each adapter version from the bucket themselves. Their admin
  routes (load, unload) are on a port of their own and ask for a token made for the run
  (:mod:`gymfleet.run.ray_replica`).
* **The learner**: ``gymfleet learn``'s loop, on a node offering ``cluster.learner_resources``
  (and ``cluster.learner_gpus`` GPUs), started, watched and stopped through a
  :class:`RayLearner` (a :class:`~gymfleet.run.learner.LearnerHandle`). With
  ``learner.world_size`` > 1 each data-parallel rank is an actor of its own, all in one
  placement group (:mod:`gymfleet.run.ray_learner`).

This is the GRPO stage's :class:`RayPlacement`; the job's other stages (warm start, held-out
evaluation, report and verdict) run on this machine, the launcher, as for ``gymfleet train``
(:mod:`gymfleet.run.job`). The actors are in :mod:`gymfleet.run.ray_roles`.

Ray restarts an actor whose process or node dies (``max_restarts``) and retries its ``run`` call
(``max_task_retries``): a restarted shard or learner resumes from the store and the bucket as a
restarted process does. The store and the bucket join them, so both must be reachable from every
node: a local bucket path or SQLite file is refused when the cluster spans several hosts.

Ray is an optional extra (``pip install 'gymfleet[ray]'``); gymfleet never manages the cluster.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from pydantic import JsonValue

from rich.console import Console

from gymfleet.core.errors import ConfigError, GymfleetError, TrainError
from gymfleet.orchestrator import RunConfig, RunStatus, TrajectoryStore
from gymfleet.run.config import ClusterConfig, TrainConfig
from gymfleet.run.display import PLAIN_INTERVAL_S, summary_line
from gymfleet.run.placement import GrpoOutcome
from gymfleet.run.ray_learner import RayLearner
from gymfleet.run.heldout import HeldOutEvaluation
from gymfleet.run.ray_replica import ReplicaRole, admin_token, replica_engine, replica_ports, shard_policy_engines
from gymfleet.run.ray_roles import ShardRole, StageRole
from gymfleet.run.records import ClusterSection, GenerationTimeline, ReplicaStats, ShardResult
from gymfleet.run.warmstart import WarmStartOutcome, describe
from gymfleet.trainer import AdapterBucket, StepRow, last_row

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle

log = logging.getLogger(__name__)


class RayPlacement:
    """The job's roles as Ray actors on the cluster ``ray`` is connected to: GRPO's shards,
    replicas and learner, and a :class:`~gymfleet.run.ray_roles.StageRole` for the warm start (on
    the learner's resources) and for each held-out evaluation (on a shard's resources).

    Args:
        ray: the ``ray`` module, initialised.
        address: the cluster's address (for the report).
        hosts: the cluster's live hosts.

    Attributes:
        stages: where each stage around GRPO ran (``warm_start``, ``heldout_base``, ``heldout``),
            the report's ``cluster.stages``.
    """

    def __init__(self, ray: ModuleType, address: str, hosts: set[str]) -> None:
        self.ray = ray
        self.address = address
        self.hosts = hosts
        self.stages: dict[str, str] = {}

    async def warm_start(self, cfg: TrainConfig, console: Console) -> WarmStartOutcome | None:
        """The warm start on a :class:`StageRole` actor where the learner trains (see
        :meth:`gymfleet.run.placement.Placement.warm_start`)."""
        if not cfg.warmstart.enabled:
            return None
        cl = cfg.cluster
        outcome = await self._on_actor("warm_start", {"num_cpus": cl.learner_cpus, "num_gpus": cl.learner_gpus,
                                                      "resources": cl.learner_resources}, cfg)
        assert outcome is None or isinstance(outcome, WarmStartOutcome)
        if outcome is not None:
            console.print(describe(outcome), markup=False, highlight=False)
        return outcome

    async def heldout(self, cfg: TrainConfig, console: Console, *, base_only: bool = False,
                      known: HeldOutEvaluation | None = None) -> HeldOutEvaluation:
        """The held-out evaluation on a :class:`StageRole` actor where a shard would run (see
        :meth:`gymfleet.run.placement.Placement.heldout`)."""
        cl = cfg.cluster
        console.print(f"held-out evaluation{' of the base model' if base_only else ''} on a Ray actor",
                      markup=False, highlight=False)
        evaluation = await self._on_actor("heldout_base" if base_only else "heldout", {
            "num_cpus": cl.shard_cpus, "resources": cl.shard_resources}, cfg, base_only, known)
        assert isinstance(evaluation, HeldOutEvaluation)
        return evaluation

    async def _on_actor(self, stage: str, options: dict[str, object], *args: object) -> object:
        """Runs ``StageRole.<stage>(*args)`` on a fresh actor placed with ``options``, then ends it.

        Raises:
            GymfleetError: the one the stage raised on the actor (a config, a store, the bucket).
            TrainError: the actor died.
        """
        ray = self.ray
        actor = ray.remote(StageRole).options(name=f"gymfleet-{stage.replace('_', '-')}-{id(self)}",
                                              max_restarts=0, **options).remote()
        method = "heldout" if stage.startswith("heldout") else stage
        try:
            result, where = await asyncio.to_thread(ray.get, getattr(actor, method).remote(*args))
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, GymfleetError):
                raise cause from None
            raise TrainError(f"the {stage} stage failed on its Ray actor: {exc}") from exc
        except ray.exceptions.RayError as exc:
            raise TrainError(f"the {stage} stage's Ray actor died: {exc}") from exc
        finally:
            ray.kill(actor, no_restart=True)
        self.stages[stage] = where
        return result

    async def grpo(self, cfg: TrainConfig, console: Console, live: bool | None = None,
                   progress_every_s: float | None = None) -> GrpoOutcome:
        """Places the shards, the replicas and the learner; waits for the learner's budget (the
        wall budget stops it); stops and sweeps everything. See :meth:`gymfleet.run.placement.Placement.grpo`.

        Raises:
            ConfigError: a role asks for resources no node offers, or replica actors did not start.
            TrainError: the learner failed for good (after its restarts).
        """
        ray, cl, run = self.ray, cfg.cluster, cfg.run
        started_at, t0 = time.time(), time.monotonic()
        check_resources(ray.cluster_resources(), cl)
        restarts = {"max_restarts": cl.max_restarts, "max_task_retries": -1, "max_concurrency": 2}
        replicas, shard_configs = await asyncio.to_thread(_place_replicas, ray, run, cl, restarts)
        try:
            learner = await asyncio.to_thread(RayLearner.place, ray, cfg, restarts)
        except ConfigError:
            for replica in replicas:
                ray.kill(replica, no_restart=True)
            raise
        local_dir = str(Path(cfg.report_dir).resolve() / "adapters")
        shards = [ray.remote(ShardRole).options(
            name=f"gymfleet-shard-{run.run_id}-{i}", num_cpus=cl.shard_cpus, resources=cl.shard_resources,
            **restarts).remote(shard_configs[i], cfg.bucket, i, local_dir, fetch_remote=not replicas)
            for i in range(cl.shards)]
        console.print(f"run {run.run_id} on Ray ({len(self.hosts)} host(s), {len(ray.nodes())} node(s)): "
                      f"{cl.shards} shard(s), {len(replicas)} replica actor(s), 1 learner"
                      f"{f' ({cfg.learner.world_size} rank actors)' if cfg.learner.world_size > 1 else ''}", markup=False, highlight=False)
        shard_runs = [s.run.remote() for s in shards]
        learner.start()
        ticker = asyncio.create_task(progress_lines(cfg, console, t0, progress_every_s or PLAIN_INTERVAL_S))
        try:
            wall_spent = await learner.run_out(cfg.budget.max_wall_s, t0)
            await learner.wait()
        finally:
            ticker.cancel()
            results = await asyncio.to_thread(_stop_shards, ray, shards, shard_runs, cl.stop_wait_s)
            replica_stats = await asyncio.to_thread(_replica_stats, ray, replicas)
            for actor in [*shards, *replicas]:
                ray.kill(actor, no_restart=True)
            learner.kill()
            swept = await asyncio.to_thread(_sweep_nodes, ray, run.run_id)
        end = learner.end
        spent = wall_spent or (cfg.budget.max_steps is not None and end is not None and end.step == cfg.budget.max_steps)
        status = RunStatus.completed_budget if spent else RunStatus.interrupted
        await _record_status(cfg.run.store, run.run_id, status)
        return GrpoOutcome(
            GenerationTimeline(started_at=started_at, wall_s=time.monotonic() - t0),
            status,
            cluster=ClusterSection(self.address, sorted(self.hosts), results, end, swept, replica_stats,
                                   self.stages))  # the held-out stage after GRPO adds its entry to the same dict


async def _record_status(store_url: str, run_id: str, status: RunStatus) -> None:
    """The run's status in the store as the launcher decided it: the shards were stopped from
    outside, so each recorded ``interrupted`` (``runs list`` must say what the run said)."""
    try:
        async with await TrajectoryStore.open(store_url) as store:
            await store.set_run_status(run_id, status)
    except (GymfleetError, OSError) as exc:  # the report still says it; a rerun records it again
        log.warning("could not record run %s as %s in the store: %s", run_id, status.value, exc)


async def progress_lines(cfg: TrainConfig, console: Console, t0: float, interval_s: float) -> None:
    """Prints the plain progress line of a one-machine run (:func:`gymfleet.run.display.summary_line`)
    every ``interval_s`` seconds, from the store, the bucket and the learner's log (when this
    machine sees it), until cancelled. A look that fails (the store busy, the run not started
    yet) is skipped: progress must never stop the run."""
    run_id = cfg.run.run_id
    bucket = AdapterBucket(cfg.bucket, run_id)
    try:
        store = await TrajectoryStore.open(cfg.run.store)
    except (GymfleetError, OSError) as exc:
        log.warning("no progress lines: the store does not open here (%s)", exc)
        return
    async with store:
        while True:
            await asyncio.sleep(interval_s)
            try:
                summary = await store.run_summary(run_id)
                version = await asyncio.to_thread(bucket.newest_version)
            except (GymfleetError, OSError) as exc:
                log.debug("no progress line this time: %s", exc)
                continue
            row = last_row(Path(cfg.report_dir), StepRow)
            console.print(summary_line(summary, time.monotonic() - t0, version,
                                       f"learner step {'-' if row is None else row.step}"),
                          markup=False, highlight=False, soft_wrap=True)


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


def ray_placement(cfg: TrainConfig, address: str) -> RayPlacement:
    """Connects to the Ray cluster at ``address`` and checks that it can run ``cfg``: the
    placement ``gymfleet train --cluster`` hands :func:`gymfleet.run.job.run_job`.

    Args:
        cfg: the training run (async mode).
        address: ``auto`` (the cluster this machine is part of) or ``ray://HOST:PORT``, or the
            address ``ray.init`` takes.

    Raises:
        ConfigError: Ray is not installed, sync mode, or a store/bucket the nodes cannot share.
    """
    try:
        import ray
    except ImportError:
        raise ConfigError("--cluster needs Ray: pip install 'gymfleet[ray]'") from None
    if cfg.mode != "async":
        raise ConfigError("--cluster runs mode: async only (the lock-step baseline is a one-machine run)")
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    hosts = {n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}
    check_reachable(cfg.run.store, cfg.bucket, hosts)
    return RayPlacement(ray, address, hosts)


def _place_replicas(ray: ModuleType, run: RunConfig, cl: ClusterConfig,
                    restarts: dict[str, int]) -> tuple[list[ActorHandle], list[dict[str, JsonValue]]]:
    """Starts ``cl.replicas_per_shard`` replica actors per shard and waits until they serve;
    returns them and each shard's run config (its ``policy.engines`` the replicas' URLs when
    there are replicas, else the run's own)."""
    if not cl.replicas_per_shard:
        return [], [run.model_dump(mode="json")] * cl.shards
    n, token = cl.shards * cl.replicas_per_shard, admin_token()
    replicas = [ray.remote(ReplicaRole).options(
        name=f"gymfleet-replica-{run.run_id}-{j}", num_cpus=cl.replica_cpus, num_gpus=cl.replica_gpus,
        resources=cl.replica_resources, max_restarts=restarts["max_restarts"], max_task_retries=-1).remote(
        replica_engine(run, cl, j), *replica_ports(cl, j, n), token) for j in range(n)]
    try:
        addresses = ray.get([r.address.remote() for r in replicas], timeout=600)
    except (ray.exceptions.RayError, RuntimeError) as exc:
        for replica in replicas:
            ray.kill(replica, no_restart=True)
        raise ConfigError(f"the replica actors did not start within 600 s: {exc}") from exc
    configs = []
    for i in range(cl.shards):
        first = i * cl.replicas_per_shard
        policy = run.policy.model_dump(mode="json") | {
            "engines": shard_policy_engines(addresses[first:first + cl.replicas_per_shard], first, token)}
        configs.append(run.model_dump(mode="json") | {"policy": policy})
    return replicas, configs


def _stop_shards(ray: ModuleType, shards: list[ActorHandle], shard_runs: list[ObjectRef],
                 wait_s: float) -> list[ShardResult]:
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


def _replica_stats(ray: ModuleType, replicas: list[ActorHandle]) -> list[ReplicaStats]:
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


def _sweep_nodes(ray: ModuleType, run_id: str) -> dict[str, int]:
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

