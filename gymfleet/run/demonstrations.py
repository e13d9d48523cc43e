"""Recording a training run's demonstrations: gold-policy episodes of its tasks, stored token-exact.

Demonstrations are a run like any other, composed by :func:`~gymfleet.run.compose.open_run` and
driven by its :class:`~gymfleet.orchestrator.scheduler.Scheduler` (the task's env, turn and time
limits, ``max_in_flight``, retries of infrastructure failures, resume): only the policy differs,
a :class:`~gymfleet.orchestrator.teacher_forcing.DemonstrationGateway` that plays each instance's gold
policy, so the tokens are rendered by the policy's chat template exactly as in the run's
rollouts. They are stored in the run's store under their own run id, ``<run_id>.demos`` (one
group of one sample per instance and episode, ``metrics["demonstration"] = True``): the learner
claims groups of the training run only, never these.

A task on ``gymfleet/Harness-v0`` is recorded through its harness: the harness runs its own loop
against a gateway session whose engine answers with the gold actions written in the harness's
format (:func:`~gymfleet.envs.harness.harnesses.gold_replies`, forced by a
:class:`~gymfleet.orchestrator.http.forcing.ScriptedRepliesEngine`), so the demonstration holds the
harness's own prompts (its system prompt, tool rendering, observation format) and the tokens come
from the gateway, as in a harness rollout (docs/harness.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from gymfleet.core.errors import ConfigError
from gymfleet.core.records import RolloutStatus, Trajectory
from gymfleet.envs.base import ScriptedPolicy
from gymfleet.orchestrator import (
    HARNESS_ENV_ID, DemonstrationGateway, Gateway, GatewayConfig, RunConfig, ScriptedRepliesEngine, TaskConfig,
    TrajectoryStore, group_id_of)
from gymfleet.run.compose import Run, open_run


def demo_run_id(run_id: str) -> str:
    """The run id demonstrations of ``run_id`` are stored under."""
    return f"{run_id}.demos"


@dataclass
class DemoRecording:
    """What recording did.

    Attributes:
        run_id: where the demonstrations are stored (``<run_id>.demos``).
        by_status: episodes recorded this time, per status.
        n_solved: stored episodes that are ok or truncated and earned reward > 0.
        left_out: tasks this machine cannot run, and why.
    """

    run_id: str
    by_status: dict[str, int] = field(default_factory=dict)
    n_solved: int = 0
    left_out: dict[str, str] = field(default_factory=dict)


def demonstration_run(config: RunConfig, episodes_per_instance: int = 1,
                      max_instances_per_task: int | None = None) -> RunConfig:
    """The run that records ``config``'s demonstrations: run id ``<run_id>.demos``, each task once
    per instance and episode (groups of one: ``passes = episodes_per_instance``), on the first
    ``max_instances_per_task`` instances; its own metrics file; no staleness gate."""
    metrics = Path(config.metrics_path)
    tasks = [t.model_copy(update={
        "group_size": 1, "passes": episodes_per_instance, "weight": 1.0,
        "max_instances": min(filter(None, (t.max_instances, max_instances_per_task)), default=None)})
        for t in config.tasks]
    return config.model_copy(update={
        "run_id": demo_run_id(config.run_id), "tasks": tasks, "max_staleness": None,
        "metrics_path": str(metrics.with_name(f"{metrics.stem}.demos{metrics.suffix}"))})


async def record_demonstrations(config: RunConfig, tokenizer: Any, episodes_per_instance: int = 1,
                                max_instances_per_task: int | None = None,
                                console: Console | None = None) -> DemoRecording:
    """Plays ``episodes_per_instance`` gold episodes of each instance of each task and stores them
    (:func:`demonstration_run` through :func:`~gymfleet.run.compose.open_run`; a recording cut
    short resumes where it stopped).

    Args:
        config: the training run's collection (tasks, store, resources).
        tokenizer: the policy's tokenizer.
        episodes_per_instance: gold episodes per instance.
        max_instances_per_task: the first this many instances of each task; None: all.
        console: where messages go (tasks left out...).

    Raises:
        ConfigError: no task can run here, a task's env or instances are wrong, or a harness
            task's gold policy is not a list of actions.
        ChatTemplateError: the policy's chat template is not append-only.
        StoreError: the store cannot be opened or written.
    """
    gateway = DemonstrationGateway(tokenizer)
    forced = ScriptedRepliesEngine(tokenizer)
    harness_gateway = Gateway(tokenizer, forced, GatewayConfig(run_id="demonstrations"))
    demos = demonstration_run(config, episodes_per_instance, max_instances_per_task)
    async with open_run(demos, console=console, gateway=gateway, harness_gateway=harness_gateway) as run:
        await _expect_gold(run, gateway, forced)
        outcome = await run.scheduler.run()
        stored = await run.store.trajectories(demos.run_id, limit=None)
    return DemoRecording(demos.run_id, dict(outcome.by_status),
                         sum(_solved(s.trajectory) for s in stored), dict(run.left_out))


async def _expect_gold(run: Run, gateway: DemonstrationGateway, forced: ScriptedRepliesEngine) -> None:
    """Registers each group's gold policy with the gateway, or, for a harness task, its gold
    replies in the harness's format with the forcing engine (gold policies are stateless: one
    env of each task makes them all)."""
    for task in run.config.tasks:
        gold = run.factories[task.name]()
        try:
            for instance_id in run.instances[task.name]:
                policy = gold.gold_policy(instance_id)
                replies = _harness_gold(task, instance_id, policy) if task.env_id == HARNESS_ENV_ID else None
                for pass_idx in range(task.passes or 1):
                    group_id = group_id_of(run.config.run_id, task.name, pass_idx, instance_id)
                    if replies is None:
                        gateway.expect_group(group_id, policy)
                    else:
                        forced.script_group(group_id, replies)
        finally:
            await gold.close_async()


def _harness_gold(task: TaskConfig, instance_id: str, policy: object) -> list[str]:
    """The completions that play ``policy``'s gold actions through the task's harness.

    Raises:
        ConfigError: the gold policy is not a fixed list of actions (it cannot be written ahead).
    """
    from gymfleet.envs.harness.env import HarnessEnvConfig
    from gymfleet.envs.harness.harnesses import gold_replies

    if not isinstance(policy, ScriptedPolicy):
        raise ConfigError(f"task {task.name}: the gold policy of {instance_id} is a {type(policy).__name__}, not a "
                          "list of actions, so it cannot be forced through a harness; disable the warm start "
                          "(warmstart.enabled: false) or give the task env a scripted gold policy")
    return gold_replies(HarnessEnvConfig(**task.env_kwargs).harness, policy.actions)


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
