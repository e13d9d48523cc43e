"""The packages' one-way layers: core <- envs, orchestrator, trainer <- run (the app) <- cli.

* the core imports none of the others;
* the trainer (the learner) imports only the core, the trajectory store and itself;
* nothing outside trainer/ imports a trainer module: the app uses ``gymfleet.trainer``'s names;
* only the app (``gymfleet.run``) and the command line import the app.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"gymfleet": "gymfleet", "envs": "gymfleet.envs", "orchestrator": "gymfleet.orchestrator",
           "trainer": "gymfleet.trainer"}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder)
            if "tasks" in rel.parts:  # files that run inside sandboxes
                continue
            parts = [package, *rel.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n.startswith("gymfleet")}


MODULES = _modules()


def _within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, "gymfleet.core")))
def test_the_core_imports_no_other_package(module: str) -> None:
    assert {i for i in _imports(MODULES[module]) if not _within(i, "gymfleet.core")} == set()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, "gymfleet.trainer")))
def test_the_trainer_depends_on_the_core_and_the_store_only(module: str) -> None:
    allowed = ("gymfleet.core", "gymfleet.orchestrator.store", "gymfleet.trainer")
    assert {i for i in _imports(MODULES[module]) if not _within(i, *allowed)} == set()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not _within(m, "gymfleet.trainer")))
def test_no_module_outside_the_trainer_imports_its_internals(module: str) -> None:
    assert {i for i in _imports(MODULES[module]) if i.startswith("gymfleet.trainer.")} == set()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, "gymfleet.envs", "gymfleet.orchestrator")))
def test_envs_and_orchestrator_never_import_the_app(module: str) -> None:
    assert {i for i in _imports(MODULES[module]) if _within(i, "gymfleet.run", "gymfleet.trainer")} == set()


def test_the_verdict_reads_only_the_report() -> None:
    """``gymfleet.run.verdict`` judges a run from its report dict alone (so a report read back from
    disk, or one from ``train --cluster``, is judged the same way)."""
    assert _imports(MODULES["gymfleet.run.verdict"]) == set()


def test_the_heldout_evaluation_never_imports_the_job() -> None:
    """``gymfleet eval heldout`` runs the held-out evaluation without the training job."""
    assert {i for i in _imports(MODULES["gymfleet.run.heldout"]) if _within(i, "gymfleet.run.job")} == set()
