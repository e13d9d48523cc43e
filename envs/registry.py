"""The env registry: Gymnasium's registry, plus an entry-point group for plugins.

Built-in envs are registered by :func:`register_builtin_envs`. A third-party package
registers its own by declaring, in its ``pyproject.toml``::

    [project.entry-points."gymfleet.envs"]
    mypkg = "mypkg.envs:register"   # a callable that calls gymnasium.register(...)

:func:`make` loads every such plugin once, then calls ``gymnasium.make``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium

from gymfleet.envs.base import AgentEnv
from gymfleet.envs.errors import UnknownEnvError

if TYPE_CHECKING:
    from gymfleet.envs.resources import EnvResources

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "gymfleet.envs"
NAMESPACE = "gymfleet"

# (env id, "module:Class", max_episode_steps or None, kwargs). Env families add their line here.
BUILTIN_ENVS: list[tuple[str, str, int | None, dict[str, Any]]] = [
    ("gymfleet/Terminal-v0", "gymfleet.envs.terminal:TerminalEnv", None, {}),
    # the easy tier: single-command tasks in many words (envs/terminal/easy.py writes the folders)
    ("gymfleet/TerminalEasy-v0", "gymfleet.envs.terminal:TerminalEnv", None,
     {"tasks_dir": str(Path(__file__).resolve().parent / "terminal" / "tasks-easy"), "prompt": "brief"}),
    ("gymfleet/SWE-v0", "gymfleet.envs.swe.env:SWEEnv", 50, {}),
    ("gymfleet/Slides-v0", "gymfleet.envs.slides.env:SlidesEnv", None, {}),
    # community task folders (needs env_kwargs path=...; see docs/harbor.md)
    ("gymfleet/Harbor-v0", "gymfleet.envs.harbor.env:HarborEnv", None, {}),
]


def register_builtin_envs() -> None:
    """Registers gymfleet's own envs with Gymnasium. Idempotent."""
    for env_id, entry_point, max_steps, kwargs in BUILTIN_ENVS:
        if env_id not in gymnasium.registry:
            gymnasium.register(
                id=env_id,
                entry_point=entry_point,
                max_episode_steps=max_steps,
                kwargs=dict(kwargs),
                disable_env_checker=False,
            )
    _register_families()


def _register_families() -> None:
    """Families with many generated ids (e.g. one per MiniWoB task) register themselves."""
    for module_name in _FAMILY_MODULES:
        try:
            module = __import__(module_name, fromlist=["register_envs"])
        except ImportError as exc:  # an optional extra that is not installed
            log.debug("env family %s not available: %s", module_name, exc)
            continue
        module.register_envs()


# Modules exposing ``register_envs()``; each registers a family of ids.
_FAMILY_MODULES: list[str] = [
    "gymfleet.envs.browser.miniwob",
]

_plugins_loaded = False


def load_plugins() -> None:
    """Registers the built-in envs and calls every ``gymfleet.envs`` entry point once."""
    global _plugins_loaded  # noqa: PLW0603 - a load-once latch over Gymnasium's own global registry
    if _plugins_loaded:
        return
    register_builtin_envs()
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.value == f"{__name__}:register_builtin_envs":
            continue
        try:
            ep.load()()
        except Exception as exc:  # a broken plugin must not take the others down
            log.warning("gymfleet.envs plugin %r failed to register: %s", ep.name, exc)
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
# (as Gymnasium env packages do), so that a plain Gymnasium user can `import gymfleet.envs.registry`
# and then `gymnasium.make("gymfleet/Terminal-v0")` (or `gymnasium.make("gymfleet.envs.registry:gymfleet/Terminal-v0")`).
load_plugins()
