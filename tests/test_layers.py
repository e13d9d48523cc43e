"""The packages' one-way layers: core <- envs, orchestrator, trainer <- run (the app) <- cli.

* the core imports none of the others;
* the trainer (the learner) imports only the core, the trajectory store and itself;
* nothing outside trainer/ imports a trainer module: the app uses ``gymfleet.trainer``'s names;
* nothing outside orchestrator/ but the trainer (which reads the store) imports an orchestrator
  module: the app, the command line and the viewer use ``gymfleet.orchestrator``'s names;
* no production module imports ``unittest.mock``;
* only the app (``gymfleet.run``) and the command line import the app;
* no placement (local, Ray) imports the job;
* the app touches a scheduler only through its public face (:data:`SCHEDULER_FACE`): admission
  is the orchestrator's, fed the learner's progress, never the app's counters;
* no import circle anywhere, counting imports inside functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
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


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not _within(m, "gymfleet.orchestrator", "gymfleet.trainer")))
def test_the_orchestrators_face_is_the_only_door(module: str) -> None:
    """``gymfleet.orchestrator.__all__`` is what the app, the command line and the viewer may use."""
    assert {i for i in _imports(MODULES[module]) if i.startswith("gymfleet.orchestrator.")} == set()


def test_every_name_of_the_orchestrators_face_resolves() -> None:
    import gymfleet.orchestrator as face

    assert face.__all__ and [n for n in face.__all__ if getattr(face, n, None) is None] == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_production_module_imports_unittest_mock(module: str) -> None:
    names = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    assert {n for n in names if _within(n, "unittest.mock", "mock")} == set()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, "gymfleet.envs", "gymfleet.orchestrator")))
def test_envs_and_orchestrator_never_import_the_app(module: str) -> None:
    assert {i for i in _imports(MODULES[module]) if _within(i, "gymfleet.run", "gymfleet.trainer")} == set()


def test_the_verdict_reads_only_the_report() -> None:
    """``gymfleet.run.verdict`` judges a run from its report record alone (so a report read back from
    disk, or one from ``train --cluster``, is judged the same way); the learner's exit status is the
    trainer's constant."""
    assert _imports(MODULES["gymfleet.run.verdict"]) == {"gymfleet.run.records", "gymfleet.trainer"}


PLACEMENTS = ("gymfleet.run.placement", "gymfleet.run.local", "gymfleet.run.cluster", "gymfleet.run.ray_roles")


@pytest.mark.parametrize("module", PLACEMENTS)
def test_no_placement_imports_the_job(module: str) -> None:
    """The job asks its placement for roles; a placement never runs the job (``run_job`` is called
    by its launcher: ``gymfleet train``, with ``--cluster`` too)."""
    assert {t for t in _targets(module, MODULES[module]) if _within(t, "gymfleet.run.job")} == set()


SCHEDULER_FACE = {"run", "request_stop", "learner_progressed", "set_weights", "stuck_at_weight_zero", "stats"}
"""What the app may use of a :class:`~gymfleet.orchestrator.Scheduler`: run and stop it, hand on the
learner's progress, change weights, ask why it stalls, read its progress record."""


def _scheduler_uses(path: Path) -> set[str]:
    """Attributes read or written on anything named ``scheduler`` (``scheduler.x``, ``run.scheduler.x``)."""
    used = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name == "scheduler":
                used.add(node.attr)
    return used


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, "gymfleet.run")))
def test_the_run_layer_touches_the_scheduler_only_through_its_face(module: str) -> None:
    assert _scheduler_uses(MODULES[module]) <= SCHEDULER_FACE


def test_the_scheduler_face_check_sees_budgets_and_work_tables(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("scheduler.group_budget = 0\nrun.scheduler.work['a'].quarantined\nscheduler.run()\n")
    assert _scheduler_uses(path) - SCHEDULER_FACE == {"group_budget", "work"}


def test_the_heldout_evaluation_never_imports_the_job() -> None:
    """``gymfleet eval heldout`` runs the held-out evaluation without the training job."""
    assert {i for i in _imports(MODULES["gymfleet.run.heldout"]) if _within(i, "gymfleet.run.job")} == set()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, "gymfleet.envs")))
def test_envs_never_import_the_orchestrator(module: str) -> None:
    assert {i for i in _imports(MODULES[module]) if _within(i, "gymfleet.orchestrator")} == set()


def _targets(module: str, path: Path) -> set[str]:
    """The package's modules ``module`` imports, wherever the import statement is (a function,
    ``if TYPE_CHECKING:``): ``from P import N`` is module ``P.N`` when that is one, else ``P``;
    the module's own packages are left out (Python imports them first whatever it imports)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                      for a in node.names}
    return {t for t in found if t in MODULES and t != module and not module.startswith(t + ".")}


def _circles() -> list[frozenset[str]]:
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    graph.add_edges_from((m, t) for m, path in MODULES.items() for t in _targets(m, path))
    return [frozenset(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]


def test_no_import_circle_in_the_package() -> None:
    """Modules that import each other (directly or round a longer loop), counting imports inside
    functions and under TYPE_CHECKING, which hide a circle from Python but not from a reader."""
    assert [sorted(c) for c in _circles()] == []


def test_the_circle_finder_sees_imports_inside_functions_and_type_checking(tmp_path: Path) -> None:
    """An import in a function or under TYPE_CHECKING is an edge (the run layer's circle was
    closed by one before its records moved to ``gymfleet.run.records``); the module's own
    package is not."""
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gymfleet.run import heldout\n"
                      "import gymfleet.run\ndef f():\n    from gymfleet.run.records import TrainReport\n")
    assert _targets("gymfleet.run.job", source) == {"gymfleet.run.heldout", "gymfleet.run.records"}
