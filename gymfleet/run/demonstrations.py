"""Recording a training run's demonstrations: gold-policy episodes of its tasks, stored token-exact.

Each episode is a real :class:`~gymfleet.orchestrator.rollout.Rollout` (the task's env, turn and
time limits) played through a :class:`~gymfleet.orchestrator.demos.DemonstrationGateway`, so the
tokens are rendered by the policy's chat template exactly as in the run's rollouts. They are
stored in the run's store under their own run id, ``<run_id>.demos``, with no group or sample
rows and ``metrics["demonstration"] = True``: the learner's claims (groups of the run) never see
them.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

from gymfleet.core.records import RolloutStatus, Trajectory
from gymfleet.envs.resources import EnvResources
from gymfleet.orchestrator.config import RunConfig, TaskConfig
from gymfleet.orchestrator.demos import DemonstrationGateway
from gymfleet.orchestrator.envfactory import env_factory, resolve_instances
from gymfleet.orchestrator.rollout import EnvFactory, Rollout, RolloutRequest
from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.orchestrator.store.schema import RunStatus
from gymfleet.run.compose import runnable_tasks


def demo_run_id(run_id: str) -> str:
    """The run id demonstrations of ``run_id`` are stored under."""
    return f"{run_id}.demos"


@dataclass
class DemoRecording:
    """What recording did.

    Attributes:
        run_id: where the demonstrations are stored (``<run_id>.demos``).
        by_status: episodes recorded this time, per status.
        n_solved: episodes recorded this time that are ok or truncated and earned reward > 0.
        left_out: tasks this machine cannot run, and why.
    """

    run_id: str
    by_status: dict[str, int] = field(default_factory=dict)
    n_solved: int = 0
    left_out: dict[str, str] = field(default_factory=dict)


async def record_demonstrations(config: RunConfig, store: TrajectoryStore, tokenizer: Any,
                                episodes_per_instance: int = 1,
                                max_instances_per_task: int | None = None) -> DemoRecording:
    """Plays ``episodes_per_instance`` gold episodes of each instance of each task and stores them.

    At most ``config.max_in_flight`` episodes run at once.

    Args:
        config: the training run's collection (tasks, store, resources).
        store: the run's store (open).
        tokenizer: the policy's tokenizer.
        episodes_per_instance: gold episodes per instance.
        max_instances_per_task: the first this many instances of each task; None: all.

    Raises:
        ConfigError: no task can run here, or a task's env or instances are wrong.
        ChatTemplateError: the policy's chat template is not append-only.
    """
    gateway = DemonstrationGateway(tokenizer)
    out = DemoRecording(demo_run_id(config.run_id))
    await store.start_run(out.run_id, {"demonstrations_of": config.run_id, "tasks": [t.name for t in config.tasks],
                                       "episodes_per_instance": episodes_per_instance,
                                       "max_instances_per_task": max_instances_per_task})
    async with EnvResources.open(config.resources, run_id=out.run_id) as resources:
        config, out.left_out = runnable_tasks(config, resources)
        slots = asyncio.Semaphore(config.max_in_flight)
        for task in config.tasks:
            make = env_factory(task, resources)
            instances = (await resolve_instances(task, make))[:max_instances_per_task]
            gold = make()  # gold policies are stateless: one env of the task makes them all
            try:
                attempt = uuid.uuid4().hex[:8]  # a re-recording (after a crash) never reuses a rollout id
                requests = [_request(out.run_id, task, i, f"{k}-{attempt}")
                            for i in instances for k in range(episodes_per_instance)]
                for request in requests:
                    gateway.expect(request.rollout_id, gold.gold_policy(request.instance_id))
                trajs = await asyncio.gather(*(_play(r, make, gateway, slots) for r in requests))
            finally:
                await gold.close_async()
            for traj in trajs:
                store.add(traj, task=task.name)
                out.by_status[traj.status.value] = out.by_status.get(traj.status.value, 0) + 1
                out.n_solved += int(_solved(traj))
    await store.set_run_status(out.run_id, RunStatus.completed)
    return out


def _request(run_id: str, task: TaskConfig, instance_id: str, episode: str) -> RolloutRequest:
    return RolloutRequest(
        run_id=run_id, group_id=f"{run_id}/{task.name}/{instance_id}",
        rollout_id=f"{run_id}/{task.name}/{instance_id}/{episode}", env_id=task.registered_id,
        instance_id=instance_id, sampling=task.sampling, max_turns=task.max_turns,
        turn_timeout_s=task.turn_timeout_s, rollout_timeout_s=task.rollout_timeout_s,
    )


async def _play(request: RolloutRequest, make: EnvFactory, gateway: DemonstrationGateway,
                slots: asyncio.Semaphore) -> Trajectory:
    async with slots:
        return await Rollout(request, make, gateway).run()


SOLVED_STATUSES = frozenset({RolloutStatus.ok, RolloutStatus.truncated})
"""A gold episode cut by the task's turn limit is graded as it stands (``end_async``): with reward
it is a demonstration of what the policy may do within that limit (a one-turn terminal task whose
gold solution would submit on a second turn)."""


def _solved(traj: Trajectory) -> bool:
    return traj.status in SOLVED_STATUSES and traj.reward > 0


async def load_demonstrations(store: TrajectoryStore, run_id: str) -> list[Trajectory]:
    """The stored demonstrations of training run ``run_id`` worth learning from: status ok or
    truncated, reward > 0 (a gold episode that failed, e.g. a sandbox error, teaches nothing),
    oldest first."""
    stored = await store.trajectories(demo_run_id(run_id), limit=None)
    return [s.trajectory for s in stored if _solved(s.trajectory) and s.trajectory.metrics.get("demonstration")]
