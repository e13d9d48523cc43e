"""Makes the envs of a run's tasks: one env per rollout, from the task's env id, on the run's
shared :class:`~gymfleet.envs.resources.EnvResources` (so an env is a light object: the sandbox
comes warm from the pool, the browser context from the one Chromium)."""

from __future__ import annotations

import importlib

import gymnasium
from pydantic import ValidationError

from gymfleet.core.strict import validation_problems
from gymfleet.envs.base import AgentEnv
from gymfleet.envs.errors import UnknownEnvError
from gymfleet.envs.registry import env_class, make_agent_env
from gymfleet.envs.resources import EnvResources
from gymfleet.orchestrator.config import TaskConfig
from gymfleet.core.errors import ConfigError
from gymfleet.orchestrator.rollout import EnvFactory


def _agent_env_class(task: TaskConfig) -> type[AgentEnv]:
    """The env class of ``task`` (importing ``module`` of a ``module:env-id`` first, Gymnasium's
    convention for ids registered on import).

    Raises:
        ConfigError: the module cannot be imported, or the env id is unknown.
    """
    module, _, env_id = task.env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"task {task.name}: cannot import {module!r} for env id {task.env_id!r}: {exc}") from exc
    try:
        return env_class(env_id)  # an unknown id fails here, before any store or model is opened
    except (UnknownEnvError, TypeError) as exc:
        raise ConfigError(f"task {task.name}: env_id: {exc}") from exc


def env_factory(task: TaskConfig, resources: EnvResources | None = None) -> EnvFactory:
    """A callable making a fresh env for ``task`` (one per rollout).

    Args:
        task: the task; its ``env_kwargs`` go to the env.
        resources: the run's shared resources; None: each env opens private ones (tests).

    Raises:
        ConfigError: as :func:`task_needs`.
    """
    _agent_env_class(task)
    env_id, kwargs = task.registered_id, dict(task.env_kwargs)

    def make() -> AgentEnv:
        return make_agent_env(env_id, resources, **kwargs)

    return make


def task_needs(task: TaskConfig) -> frozenset[str]:
    """What ``task``'s env needs from the machine (``AgentEnv.requirements`` of its kwargs),
    once its ``env_kwargs`` are checked (:func:`check_env_kwargs`).

    Raises:
        ConfigError: the env id is unknown, its module cannot be imported, or its
            ``env_kwargs`` do not fit the env.
    """
    env_cls = _agent_env_class(task)
    check_env_kwargs(task, env_cls)
    return env_cls.requirements(task.env_kwargs)


def check_env_kwargs(task: TaskConfig, env_cls: type[AgentEnv] | None = None) -> None:
    """Checks ``task.env_kwargs`` (over the registered defaults) against the env's config model
    (``AgentEnv.check_kwargs``) without making an env, so that a typo at any depth is refused
    on any machine, before anything is opened.

    Raises:
        ConfigError: one line, e.g. ``task swe: env_kwargs.harness: unknown key 'timout_s': did
            you mean 'timeout_s'?``; or as :func:`task_needs`.
    """
    env_cls = env_cls or _agent_env_class(task)
    defaults = gymnasium.spec(task.registered_id).kwargs
    try:
        env_cls.check_kwargs({**defaults, **task.env_kwargs})
    except ValidationError as exc:
        raise ConfigError(f"task {task.name}: {validation_problems(exc, root='env_kwargs')}") from None


def unmet_needs(task: TaskConfig, resources: EnvResources) -> list[str]:
    """Why ``task`` cannot run on this machine: one reason per missing need (empty: it can)."""
    return resources.missing(task_needs(task), _agent_env_class(task).defined_needs(task.env_kwargs))


def _read_ids(task: TaskConfig) -> list[str]:
    assert task.instances_file is not None
    try:
        lines = task.instances_file.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"task {task.name}: cannot read instances_file {task.instances_file}: {exc}") from exc
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


async def resolve_instances(task: TaskConfig, make: EnvFactory) -> list[str]:
    """The instance ids ``task`` runs: ``instances``, else ``instances_file``, else the env's
    own list; less ``exclude_instances``; cut to ``max_instances``.

    Raises:
        ConfigError: the env lists no instances, or the config names ones it does not have.
    """
    env = make()
    try:
        available = env.instance_ids()
        if task.instances is not None:
            ids = list(task.instances)
        elif task.instances_file is not None:
            ids = _read_ids(task)
        else:
            ids = list(available)
        unknown = [i for i in ids if i not in set(available) and not env.accepts_instance(i)]
    finally:
        await env.close_async()
    if unknown:
        raise ConfigError(
            f"task {task.name}: instances {unknown[:5]} are not in {task.env_id} "
            f"(it has {len(available)}, e.g. {available[:3]}); fix `instances:`"
        )
    if task.exclude_instances:
        excluded = set(task.exclude_instances)
        ids = [i for i in ids if i not in excluded]
    if task.max_instances is not None:
        ids = ids[: task.max_instances]
    if not ids:
        raise ConfigError(f"task {task.name}: no instances to run; check `instances:` / `max_instances:`")
    return ids
