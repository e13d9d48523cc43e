"""The env registry: Gymnasium's registry, plus an entry-point group for plugins.

What is registered, and when, is :mod:`gymfleet.envs.registration` (``import gymfleet``
registers every env once Gymnasium is imported). This module looks ids up: :func:`make` (with a
clear error for an unknown id), :func:`make_agent_env`, :func:`env_class`, :func:`list_envs`.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import logging
from typing import TYPE_CHECKING, Any

import gymnasium

from gymfleet.envs.base import AgentEnv
from gymfleet.envs.errors import UnknownEnvError
from gymfleet.envs.registration import (  # noqa: F401 - re-exported: registry.BUILTIN_ENVS etc.
    BUILTIN_ENVS,
    ENTRY_POINT_GROUP,
    NAMESPACE,
    register_builtin_envs,
    register_plugins,
)

if TYPE_CHECKING:
    from gymfleet.envs.resources import EnvResources

log = logging.getLogger(__name__)

_plugins_loaded = False


def load_plugins() -> None:
    """Registers the built-in envs and calls every ``gymfleet.envs`` entry point, once per process."""
    global _plugins_loaded  # noqa: PLW0603 - a load-once latch over Gymnasium's own global registry
    if _plugins_loaded:
        return
    register_builtin_envs()
    register_plugins()
    _plugins_loaded = True


def list_envs(namespace: str | None = None) -> list[str]:
    """Ids of every registered env that is an :class:`AgentEnv` family, sorted.

    Args:
        namespace: only ids in this namespace (e.g. ``"gymfleet"``); None for all plugins'.
    """
    load_plugins()
    ids = []
    for env_id, spec in gymnasium.registry.items():
        if namespace is not None and spec.namespace != namespace:
            continue
        if _is_agent_env(spec):
            ids.append(env_id)
    return sorted(ids)


def _is_agent_env(spec: gymnasium.envs.registration.EnvSpec) -> bool:
    ep = spec.entry_point
    if isinstance(ep, str):
        return ep.startswith("gymfleet.") or spec.namespace == NAMESPACE or _loads_agent_env(ep)
    return isinstance(ep, type) and issubclass(ep, AgentEnv)


def _loads_agent_env(entry_point: str) -> bool:
    module_name, _, attr = entry_point.partition(":")
    if module_name.startswith(("gymnasium.", "shimmy.", "ale_py")):
        return False
    try:
        obj = getattr(__import__(module_name, fromlist=[attr]), attr)
    except Exception:  # an env whose optional dependency is missing is not ours to list
        return False
    return isinstance(obj, type) and issubclass(obj, AgentEnv)


def make(env_id: str, **kwargs: Any) -> gymnasium.Env[str, str]:
    """``gymnasium.make`` after loading plugins, with a clear error for unknown ids.

    ``make(env_id, resources=resources)`` gives a gymfleet env the run's shared
    :class:`~gymfleet.envs.resources.EnvResources`.

    Raises:
        UnknownEnvError: ``env_id`` is not registered; the message lists the known ids and
            the closest matches.
    """
    load_plugins()
    if env_id not in gymnasium.registry:
        known = list_envs()
        close = difflib.get_close_matches(env_id, known, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UnknownEnvError(
            f"unknown env id {env_id!r}.{hint} Known gymfleet envs: {_summarise_ids(known)} "
            f"(all: `gymfleet envs list`). Third-party envs register through the "
            f"{ENTRY_POINT_GROUP!r} entry-point group."
        )
    return gymnasium.make(env_id, **kwargs)


def _summarise_ids(ids: list[str], max_family: int = 5) -> str:
    """The ids, with a large family such as ``gymfleet/miniwob.<task>-v0`` folded into a count."""
    families: dict[str, list[str]] = {}
    for env_id in ids:
        if "." in env_id.rpartition("/")[2]:
            families.setdefault(env_id.split(".", 1)[0], []).append(env_id)
    folded = {prefix for prefix, members in families.items() if len(members) > max_family}
    shown = [i for i in ids if not ("." in i.rpartition("/")[2] and i.split(".", 1)[0] in folded)]
    shown += [f"{len(families[p])} {p}.<task>-v0 ids" for p in sorted(folded)]
    return ", ".join(shown) or "none"


def env_class(env_id: str) -> type[AgentEnv]:
    """The :class:`AgentEnv` subclass registered as ``env_id``, without making an instance.

    Raises:
        UnknownEnvError: as :func:`make`.
        TypeError: the id is registered but is not an AgentEnv.
    """
    load_plugins()
    if env_id not in gymnasium.registry:
        make(env_id)  # raises UnknownEnvError with the known ids
    entry_point = gymnasium.registry[env_id].entry_point
    if isinstance(entry_point, str):
        module_name, _, attr = entry_point.partition(":")
        entry_point = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(entry_point, type) and issubclass(entry_point, AgentEnv)):
        raise TypeError(f"{env_id} is registered as {entry_point!r}, not a gymfleet AgentEnv")
    return entry_point


def make_agent_env(env_id: str, resources: EnvResources | None = None, **kwargs: Any) -> AgentEnv:
    """The unwrapped :class:`AgentEnv` behind ``env_id``, for async callers.

    Args:
        env_id: a registered id.
        resources: the process's shared :class:`~gymfleet.envs.resources.EnvResources`; None:
            the env opens private ones when it needs them (and closes them in ``close``).
        **kwargs: the env's own arguments.

    Raises:
        UnknownEnvError: as :func:`make`.
        TypeError: the id is registered but is not an AgentEnv.
    """
    takes = resources is not None and _takes_resources(env_id)
    env = make(env_id, **({"resources": resources} if takes else {}), **kwargs).unwrapped
    if not isinstance(env, AgentEnv):
        raise TypeError(f"{env_id} is a {type(env).__name__}, not a gymfleet AgentEnv")
    if resources is not None and not takes:
        env.attach_resources(resources)  # a plugin whose constructor does not take them
    return env


def _takes_resources(env_id: str) -> bool:
    """True when the env's constructor has a ``resources`` parameter."""
    try:
        cls = env_class(env_id)
    except TypeError:  # an entry point that is a factory function, not a class
        return False
    return "resources" in inspect.signature(cls).parameters


# Importing this module registers the built-in envs and the installed plugins' with Gymnasium
# (``import gymfleet`` does too, as soon as Gymnasium is imported: envs/registration.py).
load_plugins()
