"""Makes the envs of a run's tasks: one fresh env per rollout, from the task's env id."""

from __future__ import annotations

import importlib

from gymfleet.envs.base import AgentEnv
from gymfleet.envs.registry import make_agent_env
from gymfleet.orchestrator.config import TaskConfig
from gymfleet.orchestrator.errors import ConfigError
from gymfleet.orchestrator.rollout import EnvFactory


def env_factory(task: TaskConfig) -> EnvFactory:
    """A callable making a fresh env for ``task``.

    ``module:env-id`` imports ``module`` first (Gymnasium's convention for ids registered on
    import); a plain id goes through the gymfleet registry (built-ins and plugins).

    Raises:
        ConfigError: the module cannot be imported.
    """
    module, _, env_id = task.env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"task {task.name}: cannot import {module!r} for env id {task.env_id!r}: {exc}") from exc
    kwargs = dict(task.env_kwargs)

    def make() -> AgentEnv:
        return make_agent_env(env_id, **kwargs)

    return make


def _read_ids(task: TaskConfig) -> list[str]:
    assert task.instances_file is not None
    try:
        lines = task.instances_file.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"task {task.name}: cannot read instances_file {task.instances_file}: {exc}") from exc
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


async def resolve_instances(task: TaskConfig, make: EnvFactory) -> list[str]:
    """The instance ids ``task`` runs: ``instances``, else ``instances_file``, else the env's
    own list; cut to ``max_instances``.

    Raises:
        ConfigError: the env lists no instances, or the config names ones it does not have.
    """
    env = make()
    try:
        available = env.instance_ids()
    finally:
        await env.close_async()
    if task.instances is not None:
        ids = list(task.instances)
    elif task.instances_file is not None:
        ids = _read_ids(task)
    else:
        ids = list(available)
    unknown = [i for i in ids if i not in set(available)]
    if unknown:
        raise ConfigError(
            f"task {task.name}: instances {unknown[:5]} are not in {task.env_id} "
            f"(it has {len(available)}, e.g. {available[:3]}); fix `instances:`"
        )
    if task.max_instances is not None:
        ids = ids[: task.max_instances]
    if not ids:
        raise ConfigError(f"task {task.name}: no instances to run; check `instances:` / `max_instances:`")
    return ids
