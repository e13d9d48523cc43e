"""Registering env ids with Gymnasium: the built-in table, env families, plugins, and the hook
that does it as soon as Gymnasium is imported.

This module is light: it imports Gymnasium only inside functions and no env module, so that
``import gymfleet`` can call :func:`register_on_gymnasium_import` at no cost (Gymnasium alone
takes ~0.2 s to import). Registration stores ``"module:Class"`` entry points; an env's module
loads when the env is first made.

A third-party package registers its own envs by declaring, in its ``pyproject.toml``::

    [project.entry-points."gymfleet.envs"]
    mypkg = "mypkg.envs:register"   # a callable that calls gymnasium.register(...)
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

# No pathlib, logging or importlib.abc at module level: each costs more than the rest of
# `import gymfleet` (the finder and loader below are duck-typed, as sys.meta_path allows).

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
]

# Modules exposing ``register_envs()``; each registers a family of ids (one per MiniWoB task).
# They must not need a gymfleet module that imports Gymnasium at import time (the hook below may
# run while such a module is half imported): import those under TYPE_CHECKING.
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
            _log().debug("env family %s not available: %s", module_name, exc)
            continue
        module.register_envs()


def register_plugins() -> bool:
    """Calls every installed ``gymfleet.envs`` entry point (each registers its ids).

    Returns:
        True when every plugin registered; a plugin that raised is logged (a broken plugin must
        not take the others down) and makes it False.
    """
    import importlib.metadata  # ~30 ms: only when registering

    ok = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.value in _OWN_ENTRY_POINTS:
            continue
        try:
            ep.load()()
        except Exception as exc:
            _log().warning("gymfleet.envs plugin %r failed to register: %s", ep.name, exc)
            ok = False
    return ok


def register_all() -> None:
    """The built-in envs, then the plugins'. Idempotent (each ``register`` checks the id)."""
    register_builtin_envs()
    register_plugins()


def register_on_gymnasium_import() -> None:
    """Registers every env with Gymnasium now if Gymnasium is imported, else right after it is.

    Called by ``import gymfleet``, so that ``import gymfleet, gymnasium;
    gymnasium.make("gymfleet/Terminal-v0")`` works (as ale-py and miniwob register on import)
    without ``import gymfleet`` importing Gymnasium. The deferred case is a one-shot finder at the
    front of ``sys.meta_path`` that runs :func:`register_all` once Gymnasium's own module has
    executed. Idempotent.
    """
    if "gymnasium" in sys.modules:
        _register_quietly()
    elif not any(isinstance(finder, _AfterGymnasium) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterGymnasium())


def _register_quietly() -> None:
    """:func:`register_all`, never raising: a failure here must not break ``import gymnasium``;
    ``gymfleet.make`` registers again (and reports) on first use."""
    try:
        register_all()
    except Exception as exc:
        _log().warning("gymfleet envs not registered with Gymnasium on import: %s", exc)


class _AfterGymnasium:
    """Finds ``gymnasium`` with the finders behind it and wraps its loader so that the envs
    register once the module has executed; removes itself on first use."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != "gymnasium":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in list(sys.meta_path):
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _RegisteringLoader(spec.loader)
                return spec
        return None


class _RegisteringLoader:
    """Delegates to Gymnasium's own loader, then registers the envs."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        module.__loader__ = module.__spec__.loader = self.loader  # Gymnasium's own, as if never wrapped
        _register_quietly()

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ... of the real loader
        return getattr(self.loader, name)


def _log() -> Any:
    import logging

    return logging.getLogger(__name__)
