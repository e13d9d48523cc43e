"""What a training config fills in from the rest of itself, before it is validated (nothing is rewritten after).

:class:`~gymfleet.run.config.TrainConfig` calls :func:`resolved_parts` from a pydantic ``before``
validator: the values below are defaults that depend on other keys, resolved once into new
records, and a value the user set that contradicts another key is refused in one line rather
than overwritten:

- ``bucket`` and ``report_dir``: ``{run_id}`` filled in;
- ``max_staleness``: :data:`DEFAULT_MAX_STALENESS` when unset;
- ``policy.parity.dtype``: the learner's ``dtype`` (the start-up parity check scores replicas in
  it); a different one set by hand is refused;
- ``learner.lr_decay_steps``: ``budget.max_steps`` for a decaying schedule when unset;
- ``learner_threads``, ``engine_threads`` and each in-process engine's ``n_threads``: the split of
  :mod:`gymfleet.run.threads` when unset;
- each held-out task's ``exclude_instances``: its held-out instance ids added;
- ``shutdown.mode``: ``abort`` (when the run stops, the learner has stopped: a rollout finished
  after it would never train); ``finish`` set by hand is refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from gymfleet.orchestrator import RunConfig, TaskConfig, TransformersEngineConfig
from gymfleet.run.threads import ThreadPlan
from gymfleet.trainer import LearnerConfig

DEFAULT_MAX_STALENESS = 4
"""The staleness bound of a training run whose config sets no ``max_staleness``."""


def resolved_run(run: RunConfig, learner: LearnerConfig, plan: ThreadPlan,
                 heldout: dict[str, list[str]]) -> RunConfig:
    """``run`` with the staleness default, the shutdown mode, the parity dtype, the engines' threads
    and the held-out exclusions resolved.

    Raises:
        ValueError: ``shutdown.mode: finish``; ``policy.parity.dtype`` set to another dtype than ``learner.dtype``; a
            held-out entry naming no task, empty, or listed in the task's own ``instances``.
    """
    if "mode" in run.shutdown.model_fields_set and run.shutdown.mode != "abort":
        raise ValueError(f"shutdown.mode {run.shutdown.mode}: a training run aborts its in-flight rollouts when it "
                         "stops (the learner has stopped, so they would never train); drop shutdown.mode")
    policy = run.policy
    if "dtype" in policy.parity.model_fields_set and policy.parity.dtype != learner.dtype:
        raise ValueError(f"policy.parity.dtype is {policy.parity.dtype} but learner.dtype is {learner.dtype}: the "
                         "parity check scores replicas in the learner's dtype; drop policy.parity.dtype")
    engines = list(policy.engines)
    if policy.kind == "embedded" and not engines:  # the builder's default: one in-process engine
        engines = [TransformersEngineConfig(name="local-0", source=policy.model)]
    engines = [e.model_copy(update={"n_threads": plan.engine})
               if isinstance(e, TransformersEngineConfig) and e.n_threads is None else e for e in engines]
    policy = policy.model_copy(update={"engines": engines,
                                       "parity": policy.parity.model_copy(update={"dtype": learner.dtype})})
    staleness = DEFAULT_MAX_STALENESS if run.max_staleness is None else run.max_staleness
    shutdown = run.shutdown.model_copy(update={"mode": "abort"})
    return run.model_copy(update={"policy": policy, "max_staleness": staleness, "shutdown": shutdown,
                                  "tasks": held_out_tasks(run.tasks, heldout)})


def held_out_tasks(tasks: Sequence[TaskConfig], heldout: dict[str, list[str]]) -> list[TaskConfig]:
    """The training tasks kept off the held-out instances (added to their ``exclude_instances``).

    Raises:
        ValueError: a held-out entry names no task, is empty, or is in the task's ``instances``.
    """
    names = {t.name for t in tasks}
    for name, ids in heldout.items():
        if name not in names:
            raise ValueError(f"heldout.instances names task {name!r}, which the run does not have "
                             f"(tasks: {sorted(names)}); use one of those names")
        if not ids:
            raise ValueError(f"heldout.instances.{name} is empty: list instance ids, or drop the task")
    kept = []
    for task in tasks:
        held = heldout.get(task.name)
        if held is None:
            kept.append(task)
            continue
        trained = sorted(set(task.instances or []) & set(held))
        if trained:
            raise ValueError(f"task {task.name} lists held-out instances {trained[:5]} in its instances: a held-out "
                             f"instance is never trained on; remove them from tasks[{task.name}].instances or from "
                             f"heldout.instances.{task.name}")
        kept.append(task.model_copy(update={"exclude_instances": sorted(set(task.exclude_instances) | set(held))}))
    return kept


def resolved_learner(learner: LearnerConfig, max_steps: int | None) -> LearnerConfig:
    """``learner`` with ``lr_decay_steps`` defaulting to ``max_steps`` for a decaying schedule.

    Raises:
        ValueError: a decaying schedule with neither ``lr_decay_steps`` nor ``budget.max_steps``.
    """
    if learner.lr_decay_steps is not None or learner.lr_schedule == "constant":
        return learner
    if max_steps is None:
        raise ValueError(f"learner.lr_schedule {learner.lr_schedule} decays over learner.lr_decay_steps: "
                         "set it, or budget.max_steps")
    return learner.model_copy(update={"lr_decay_steps": max_steps})
