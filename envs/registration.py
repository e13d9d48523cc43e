"""Registering env ids with Gymnasium: the built-in table, env families and plugins.

``import gymfleet`` runs :func:`register_all` as soon as Gymnasium is imported (at once if it
is already; :func:`gymfleet.core.after_import.after_import`), so plain ``gymnasium.make``
works; importing :mod:`gymfleet.envs.registry` registers too. Registration stores
``"module:Class"`` entry points: an env's module loads when the env is first made.

A third-party package registers its own envs by declaring, in its ``pyproject.toml``::

    [project.entry-points."gymfleet.envs"]
    mypkg = "mypkg.envs:register"   # a callable that calls gymnasium.register(...)
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
from typing import Any

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "gymfleet.envs"
NAMESPACE = "gymfleet"

# (env id, "module:Class", max_episode_steps or None, kwargs). Env families add their line here.
BUILTIN_ENVS: list[tuple[str, str, int | None, dict[str, Any]]] = [
    ("gymfleet/Terminal-v0", "gymfleet.envs.terminal:TerminalEnv", None, {}),
    # the easy tier: single-command tasks in many words (envs/terminal/easy.py writes the folders)
    ("gymfleet/TerminalEasy-v0", "gymfleet.envs.terminal:TerminalEnv", None,
     {"tasks_dir": os.path.join(os.path.dirname(os.path.realpath(__file__)), "terminal", "tasks-easy"),
      "prompt": "brief"}),
    ("gymfleet/SWE-v0", "gymfleet.envs.swe.env:SWEEnv", 50, {}),
    ("gymfleet/Slides-v0", "gymfleet.envs.slides.env:SlidesEnv", None, {}),
    # community task folders (needs env_kwargs path=...; see docs/harbor.md)
    ("gymfleet/Harbor-v0", "gymfleet.envs.harbor.env:HarborEnv", None, {}),
    # a task env played by an agent harness over the HTTP gateway (docs/harness.md)
    ("gymfleet/Harness-v0", "gymfleet.envs.harness.env:HarnessEnv", None, {}),
]

# Modules exposing ``register_envs()``; each registers a family of ids (one per MiniWoB task).
# They must not need a gymfleet module that imports Gymnasium at import time (registration may
# run while such a module is half imported, Gymnasium's import being its first): import those
# under TYPE_CHECKING.
FAMILY_MODULES: list[str] = [
    "gymfleet.envs.browser.miniwob",
]


# gymfleet's own entry point (pyproject.toml), under its present and its former module.
_OWN_ENTRY_POINTS = frozenset({f"{__name__}:register_builtin_envs", "gymfleet.envs.registry:register_builtin_envs"})


def register_builtin_envs() -> None:
    """Registers gymfleet's own envs (the table and the families) with Gymnasium. Idempotent."""
    import gymnasium

    for env_id, entry_point, max_steps, kwargs in BUILTIN_ENVS:
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point, max_episode_steps=max_steps,
                               kwargs=dict(kwargs), disable_env_checker=False)
    for module_name in FAMILY_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # an optional extra that is not installed
            log.debug("env family %s not available: %s", module_name, exc)
            continue
        module.register_envs()


def register_plugins() -> None:
    """Calls every installed ``gymfleet.envs`` entry point (each registers its ids); a plugin
    that raises is logged, so that a broken plugin does not take the others down."""
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.value in _OWN_ENTRY_POINTS:
            continue
        try:
            ep.load()()
        except Exception as exc:
            log.warning("gymfleet.envs plugin %r failed to register: %s", ep.name, exc)


def register_all() -> None:
    """The built-in envs, then the plugins'. Idempotent (each ``register`` checks the id)."""
    register_builtin_envs()
    register_plugins()
