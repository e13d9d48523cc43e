"""What a run sets once for all its tasks: the sampling distribution (temperature, top_p) and each task's turn limit.

The run's ``sampling:`` block owns temperature and top_p: every turn of every task samples with
them, and a training run's learner computes its logprobs under them. They are written into each
task's ``sampling`` record by :func:`resolve_sampling` (a pydantic ``before`` validator of
:class:`~gymfleet.orchestrator.config.RunConfig`), so a task never samples with another distribution
and nothing is rewritten after validation.

The old per-task keys (``tasks[].sampling.temperature``/``top_p``) are deprecated: a value the
tasks agree on is accepted as the run's, with a one-line :class:`ConfigDeprecationWarning`; values
that disagree with each other or with the run's ``sampling:`` are refused, naming both.

The turn limit is owned by the task's ``max_turns`` (the orchestrator's loop stops there and the env
is told it at ``reset``); an env's own ``max_turns`` in ``env_kwargs`` (browser, slides) that differs
from it is refused (:func:`check_turn_limit`). An env's built-in default stays a cap of its own
(the lower limit applies, as :meth:`gymfleet.envs.sandbox_env.SandboxEnv.turn_limit` documents).
"""

from __future__ import annotations

import warnings
from typing import Any

from pydantic import BaseModel, Field

from gymfleet.core.strict import StrictModel

RUN_SAMPLING_KEYS = ("temperature", "top_p")
"""The sampling keys the run owns (the rest of a task's ``sampling`` stays the task's)."""


class ConfigDeprecationWarning(FutureWarning):
    """A config key that still loads but has moved; the message names where it goes (one line)."""


class RunSampling(StrictModel):
    """The run's sampling distribution: every turn of every task samples from it, and the learner
    computes logprobs under it (:class:`~gymfleet.trainer.RolloutPolicy`)."""

    temperature: float = Field(1.0, ge=0.0)
    """Softmax temperature; 0 means greedy (:mod:`gymfleet.core.sampling`)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""


def _explicit(record: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """The ``keys`` a raw mapping or a model instance sets explicitly."""
    if isinstance(record, BaseModel):
        return {k: getattr(record, k) for k in keys if k in record.model_fields_set}
    if isinstance(record, dict):
        return {k: record[k] for k in keys if k in record}
    return {}


def _task_field(task: Any, key: str) -> Any:
    return getattr(task, key, None) if isinstance(task, BaseModel) else task.get(key) if isinstance(task, dict) else None


def _with(record: Any, update: dict[str, Any]) -> Any:
    """``record`` with ``update`` applied: a new mapping, or a model copy (never a mutation)."""
    if isinstance(record, BaseModel):
        return record.model_copy(update=update)
    return {**(record if isinstance(record, dict) else {}), **update}


def resolve_sampling(data: dict[str, Any]) -> dict[str, Any]:
    """The run document with one sampling distribution: the run's ``sampling`` (from the tasks'
    deprecated keys when the run sets none) written into every task's ``sampling``.

    Args:
        data: a RunConfig document before validation (tasks as mappings or TaskConfig instances).

    Returns:
        A new document; ``data`` is not changed.

    Raises:
        ValueError: two tasks, or a task and the run's ``sampling``, set different values (one line,
            naming both places).
    """
    run = _explicit(data.get("sampling"), RUN_SAMPLING_KEYS)
    given: dict[str, tuple[Any, str]] = {}
    for i, task in enumerate(data["tasks"]):
        for key, value in _explicit(_task_field(task, "sampling"), RUN_SAMPLING_KEYS).items():
            where = f"tasks.{i}.sampling.{key}"
            if key in run and run[key] != value:
                raise ValueError(f"{where} is {value} but sampling.{key} is {run[key]}: a run samples with one {key} "
                                 f"(the learner computes logprobs under it); drop {where}")
            first = given.setdefault(key, (value, where))
            if first[0] != value:
                raise ValueError(f"{first[1]} is {first[0]} but {where} is {value}: a run samples with one {key} "
                                 f"(the learner computes logprobs under it); set sampling.{key} once, at the top level")
    lifted = {key: value for key, (value, _) in given.items() if key not in run}
    if lifted:
        keys = ", ".join(f"tasks[].sampling.{k}" for k in lifted)
        block = ", ".join(f"{k}: {v}" for k, v in lifted.items())
        warnings.warn(f"{keys} is deprecated: set it once for the run, as `sampling: {{{block}}}` at the top level",
                      ConfigDeprecationWarning, stacklevel=2)
    resolved = RunSampling.model_validate({**run, **lifted})
    shared = resolved.model_dump()
    tasks = [_with(task, {"sampling": _with(_task_field(task, "sampling"), shared)}) for task in data["tasks"]]
    return {**data, "sampling": resolved, "tasks": tasks}


def check_turn_limit(index: int, task: Any, default: int) -> None:
    """Refuses a second turn limit: an env's own ``max_turns`` in ``env_kwargs`` that differs from
    the task's ``max_turns`` (its value, or ``default`` when unset).

    Args:
        index: the task's position in ``tasks`` (for the message).
        task: the task's document (a mapping or a TaskConfig).
        default: TaskConfig's default ``max_turns``.

    Raises:
        ValueError: the two differ (one line, naming the fix).
    """
    env_kwargs = _task_field(task, "env_kwargs")
    if not isinstance(env_kwargs, dict) or "max_turns" not in env_kwargs:
        return
    limit = _task_field(task, "max_turns")
    limit = default if limit is None else limit
    if env_kwargs["max_turns"] != limit:
        raise ValueError(f"tasks.{index}.env_kwargs.max_turns is {env_kwargs['max_turns']} but tasks.{index}.max_turns "
                         f"is {limit}: a task has one turn limit, its max_turns; set tasks.{index}.max_turns: "
                         f"{env_kwargs['max_turns']} and drop env_kwargs.max_turns")
