"""One error tree: every exception class gymfleet defines is a GymfleetError, under its boundary's root."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from gymfleet.core import errors as core

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"gymfleet": "gymfleet", "envs": "gymfleet.envs", "orchestrator": "gymfleet.orchestrator",
           "trainer": "gymfleet.trainer"}


def _error_classes() -> list[type[BaseException]]:
    """Every public class whose name ends in Error, in every module of the four folders."""
    found = []
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder)
            if "tasks" in rel.parts or "migrations" in rel.parts or "fixtures" in rel.parts:
                continue
            names = [node.name for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, ast.ClassDef) and node.name.endswith("Error") and not node.name.startswith("_")]
            if names:
                module = importlib.import_module(".".join([package, *rel.with_suffix("").parts]))
                found += [getattr(module, n) for n in names]
    return found


def test_every_public_error_class_is_a_gymfleet_error() -> None:
    classes = _error_classes()
    assert len(classes) > 30  # envs, families, orchestrator, engines, store, trainer, core
    strays = [f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, core.GymfleetError)]
    assert not strays, f"not under GymfleetError: {strays}"


@pytest.mark.parametrize(("module", "name", "root"), [
    ("gymfleet.core.errors", "ConfigError", core.GymfleetError),
    ("gymfleet.core.models", "ModelError", core.ConfigError),
    ("gymfleet.envs.errors", "UnknownEnvError", core.EnvError),
    ("gymfleet.envs.errors", "SandboxStartError", core.SandboxError),
    ("gymfleet.envs.browser.errors", "BrowserStartError", core.SandboxError),
    ("gymfleet.envs.swe.errors", "SWESetupError", core.EnvError),
    ("gymfleet.orchestrator.engines.errors", "ReplicaTimeoutError", core.InferenceError),
    ("gymfleet.orchestrator.errors", "EngineError", core.InferenceError),
    ("gymfleet.orchestrator.store.errors", "ClaimExpiredError", core.StoreError),
    ("gymfleet.trainer.errors", "BucketError", core.TrainError),
])
def test_each_boundary_has_its_root(module: str, name: str, root: type[Exception]) -> None:
    assert issubclass(getattr(importlib.import_module(module), name), root)


def test_each_error_has_one_name_and_one_import_path() -> None:
    from gymfleet.core.errors import ConfigError, GymfleetError
    from gymfleet.envs import errors as env_errors
    from gymfleet.core.errors import EnvError, SandboxError
    from gymfleet.orchestrator import errors as orchestrator_errors

    assert issubclass(SandboxError, EnvError)  # `except EnvError` around an episode
    assert issubclass(ConfigError, GymfleetError) and issubclass(ConfigError, ValueError)
    assert not hasattr(env_errors, "GymfleetEnvError")
    assert not hasattr(orchestrator_errors, "OrchestratorError")
    assert "ConfigError" not in orchestrator_errors.__all__


ROOTS = {"GymfleetError", "ConfigError", "EnvError", "SandboxError", "InferenceError", "StoreError", "TrainError"}


def test_the_roots_are_imported_from_the_core_only() -> None:
    """Each root has one import path, ``gymfleet.core.errors``: no module imports one from a leaf
    module or a package face, and no face or ``errors.py`` lists one in ``__all__``."""
    strays = []
    for folder in (*FOLDERS, "tests", "benchmarks", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gymfleet")
                        and node.module != "gymfleet.core.errors"):
                    strays += [f"{path.relative_to(ROOT)}:{node.lineno} {a.name}" for a in node.names if a.name in ROOTS]
    assert strays == []
    for module in ("gymfleet.envs.errors", "gymfleet.orchestrator", "gymfleet.orchestrator.errors",
                   "gymfleet.orchestrator.engines.errors", "gymfleet.orchestrator.store.errors", "gymfleet.trainer",
                   "gymfleet.trainer.errors"):
        assert not ROOTS & set(importlib.import_module(module).__all__), module


def test_the_tree_is_drawn_in_the_docstring() -> None:
    doc = core.__doc__ or ""
    for cls in _error_classes():
        assert cls.__name__ in doc or cls.__module__.startswith("gymfleet.envs."), cls
    for root in ("ConfigError", "EnvError", "SandboxError", "InferenceError", "StoreError", "TrainError"):
        assert f"── {root}" in doc
