"""The learner on Ray (``train --cluster``): :class:`RayLearner`, and with ``learner.world_size``
> 1 each data-parallel rank an actor of its own, the ranks together in one placement group.

* **Placement**: one bundle per rank (``cluster.learner_cpus`` CPUs, ``cluster.learner_gpus``
  GPUs and ``cluster.learner_resources`` each), packed (``PACK``: on one node where one node has
  room, so gloo and nccl talk over the node's loopback or NVLink; spread over nodes otherwise).
  Rank 0 is the :class:`~gymfleet.run.ray_roles.LearnerRole` in bundle 0: it claims, deals each
  step's batch, publishes and acks. Rank ``r`` > 0 is a :class:`RankRole` in bundle ``r``, started
  by rank 0 through :class:`RayRanks` (so it dies with rank 0: Ray ends the actors an actor owns
  when it dies) and running :func:`gymfleet.trainer.follower_process`.
* **A lost rank** (its process or node gone): rank 0's next collective raises ``RankLostError``;
  the step fails before anything is published, rank 0 gives up the run's seat, and
  :class:`~gymfleet.run.ray_roles.LearnerRole` starts the learner again, with new follower actors
  in the same bundles, resuming from the last published version (the groups of the failed step,
  never acked, are claimed again by the new learner: none is trained twice).
  ``cluster.max_restarts`` bounds those retries as it bounds Ray's restarts of the actor.

The rendezvous is rank 0's node address (``ray.util.get_node_ip_address``) and a port free there.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gymfleet.core.errors import ConfigError, TrainError
from gymfleet.run.config import ClusterConfig, TrainConfig
from gymfleet.run.learner import EXIT_WAIT_S, LearnerHandle
from gymfleet.run.ray_roles import LearnerRole
from gymfleet.trainer import EndRow, FollowerRank, RankSpec, WorkerArgs, follower_process

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle
    from ray.util.placement_group import PlacementGroup

PLACEMENT_READY_S = 120.0
"""Seconds the launcher waits for the learner's placement group (every rank's bundle) to be placed."""

RANK_PID_FILE = "learner.rank{rank}.pid"
"""A follower rank's pid file in the report folder (on the rank's node), as for spawned ranks."""


def rank_bundle(cl: ClusterConfig) -> dict[str, float]:
    """One rank's resources: ``learner_cpus`` CPUs, ``learner_gpus`` GPUs and ``learner_resources``
    (amounts of 0 left out: Ray refuses them in a bundle).

    Raises:
        ConfigError: the rank asks for nothing (a bundle must hold some resource).
    """
    bundle = {k: v for k, v in {"CPU": cl.learner_cpus, "GPU": cl.learner_gpus, **cl.learner_resources}.items() if v}
    if not bundle:
        raise ConfigError("cluster.learner_cpus, learner_gpus and learner_resources are all 0: each learner rank "
                          "needs some resource to be placed; set cluster.learner_cpus: 1")
    return bundle


def learner_placement(ray: ModuleType, cl: ClusterConfig, world_size: int,
                      ready_s: float = PLACEMENT_READY_S) -> PlacementGroup:
    """Reserves the learner's ``world_size`` bundles (:func:`rank_bundle`) as one placement group.

    Raises:
        ConfigError: the cluster cannot place them within ``ready_s`` seconds (the group is removed).
    """
    from ray.util.placement_group import placement_group, remove_placement_group

    bundle = rank_bundle(cl)
    group = placement_group([dict(bundle) for _ in range(world_size)], strategy="PACK")
    ready, _ = ray.wait([group.ready()], timeout=ready_s)
    if not ready:
        remove_placement_group(group)
        total = ", ".join(f"{world_size * v:g} {k}" for k, v in bundle.items())
        raise ConfigError(f"the learner's {world_size} ranks ask for {total} in all (learner.world_size x cluster."
                          f"learner_cpus / learner_gpus / learner_resources), which the cluster did not offer within "
                          f"{ready_s:.0f} s: add nodes or resources (`ray start --num-cpus ... --resources ...`), or "
                          "lower learner.world_size")
    return group


def in_bundle(group: PlacementGroup | None, index: int) -> dict[str, Any]:
    """The actor options that put an actor in bundle ``index`` of ``group`` (none: no group)."""
    if group is None:
        return {}
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
        group, placement_group_bundle_index=index, placement_group_capture_child_tasks=False)}


class RankRole:
    """A Ray actor: data-parallel rank ``spec.rank`` > 0 of the learner
    (:func:`gymfleet.trainer.follower_process`); it never touches the store or the bucket."""

    def run(self, args: WorkerArgs, spec: RankSpec) -> int:
        """Joins rank 0's group and trains this rank's share of each step until rank 0 ends the
        group; returns this actor's pid.

        Raises:
            RankLostError: rank 0 or another rank is gone.
        """
        report = Path(args.report_dir)
        report.mkdir(parents=True, exist_ok=True)
        (report / RANK_PID_FILE.format(rank=spec.rank)).write_text(str(os.getpid()))
        follower_process(args, spec)
        return os.getpid()


class RayFollower:
    """A :class:`~gymfleet.trainer.FollowerRank` that is a :class:`RankRole` actor running."""

    def __init__(self, ray: ModuleType, actor: ActorHandle, ref: Any) -> None:
        self.ray, self.actor, self.ref = ray, actor, ref

    def is_alive(self) -> bool:
        done, _ = self.ray.wait([self.ref], timeout=0)
        return not done

    def join(self, timeout: float | None = None) -> None:
        self.ray.wait([self.ref], timeout=timeout)

    def kill(self) -> None:
        self.ray.kill(self.actor, no_restart=True)


class RayRanks:
    """The :class:`~gymfleet.trainer.RankLauncher` of a learner on Ray: follower ranks as
    :class:`RankRole` actors in bundles 1..world_size-1 of the learner's placement group
    (rank 0, the caller, is in bundle 0).

    Args:
        group: the learner's placement group (:func:`learner_placement`); None: anywhere with room.
        cl: where each rank goes (its CPUs, GPUs and resources).
        run_id: for the actors' names.
    """

    def __init__(self, group: PlacementGroup | None, cl: ClusterConfig, run_id: str) -> None:
        self.group, self.cl, self.run_id = group, cl, run_id

    def master_addr(self) -> str:
        import ray

        return str(ray.util.get_node_ip_address())

    def start(self, args: WorkerArgs, spec: RankSpec) -> list[FollowerRank]:
        import ray as module

        ray: Any = module
        followers: list[FollowerRank] = []
        for rank in range(1, spec.world_size):
            actor = ray.remote(RankRole).options(
                name=f"gymfleet-learner-{self.run_id}-rank{rank}-{os.getpid()}-{id(spec)}", max_restarts=0,
                num_cpus=self.cl.learner_cpus, num_gpus=self.cl.learner_gpus, resources=self.cl.learner_resources,
                **in_bundle(self.group, rank)).remote()
            followers.append(RayFollower(ray, actor, actor.run.remote(args, replace(spec, rank=rank))))
        return followers


class RayLearner(LearnerHandle):
    """The learner as a Ray actor (:class:`~gymfleet.run.ray_roles.LearnerRole`), restarted by Ray.

    Args:
        ray: the ``ray`` module, initialised.
        options: the actor's ``.options()`` (name, resources, restarts).

    Attributes:
        end: the learner's last ``end`` event of learner.jsonl, once :meth:`wait` returned.
    """

    def __init__(self, args: WorkerArgs, ray: ModuleType, options: dict[str, object],
                 ranks: RayRanks | None = None, rank_retries: int = 0) -> None:
        super().__init__(args)
        self.ray = ray
        self.options = options
        self.ranks = ranks
        self.rank_retries = rank_retries
        self.actor: ActorHandle | None = None
        self.ref: ObjectRef | None = None
        self.end: EndRow | None = None

    def start(self) -> None:
        self.actor = self.ray.remote(LearnerRole).options(**self.options).remote(
            self.args, self.ranks, self.rank_retries)
        self.ref = self.actor.run.remote()

    def alive(self) -> bool:
        if self.ref is None:
            return False
        done, _ = self.ray.wait([self.ref], timeout=0)
        return not done

    def stop(self) -> None:
        super().stop()
        if self.actor is not None:
            self.actor.stop.remote()  # it finishes its step and publishes what it trained

    async def wait(self, timeout_s: float = EXIT_WAIT_S) -> int | None:
        """As :meth:`LearnerHandle.wait`; a learner still running after ``timeout_s`` is killed.

        Raises:
            TrainError: the learner failed for good (after Ray's restarts).
        """
        if self.ref is None:
            return None
        self.stop()
        try:
            self.end = await asyncio.to_thread(self.ray.get, self.ref, timeout=timeout_s)
        except self.ray.exceptions.GetTimeoutError:
            self.kill()
        except self.ray.exceptions.RayError as exc:
            raise TrainError(f"the learner failed after {self.options.get('max_restarts')} restarts: {exc}") from exc
        return None

    def kill(self) -> None:
        """Ends the actor for good (no restart), its follower ranks with it, and frees the
        ranks' placement group."""
        if self.actor is not None:
            self.ray.kill(self.actor, no_restart=True)
        if self.ranks is not None and self.ranks.group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.ranks.group)
            self.ranks.group = None

    @classmethod
    def place(cls, ray: ModuleType, cfg: TrainConfig, restarts: dict[str, int]) -> RayLearner:
        """The run's learner on the cluster: one actor, or with ``learner.world_size`` > 1 one
        actor per rank in a placement group (:mod:`gymfleet.run.ray_ranks`), rank 0 in bundle 0.

        Raises:
            ConfigError: the cluster cannot place every rank.
        """
        cl, world = cfg.cluster, cfg.learner.world_size
        args = cfg.worker_args(report_dir=str(Path(cfg.report_dir).resolve()))
        options: dict[str, object] = {"name": f"gymfleet-learner-{cfg.run.run_id}", "num_cpus": cl.learner_cpus,
                                      "num_gpus": cl.learner_gpus, "resources": cl.learner_resources, **restarts}
        if world == 1:
            return cls(args, ray, options)
        group = learner_placement(ray, cl, world)
        return cls(args, ray, options | in_bundle(group, 0), RayRanks(group, cl, cfg.run.run_id), cl.max_restarts)
