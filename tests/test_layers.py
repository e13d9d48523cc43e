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


# ---- envs and trainer: no envs -> orchestrator import, no import circle (h21a; see issue 21) ----

def _edges(module: str) -> set[str]:
    """The package's modules ``module`` imports, wherever the import stands (a function body or
    ``if TYPE_CHECKING`` included); ``from package import submodule`` points at the submodule."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names} & MODULES.keys()
            found |= subs or {node.module}
    return {n for n in found if n in MODULES and n != module}


def _circles(prefix: str) -> list[list[str]]:
    """The import circles among the modules under ``prefix`` (depth-first search for back edges)."""
    graph = {m: {i for i in _edges(m) if _within(i, prefix)} for m in MODULES if _within(m, prefix)}
    circles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return circles


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, "gymfleet.envs")))
def test_envs_never_import_the_orchestrator(module: str) -> None:
    assert {i for i in _imports(MODULES[module]) if _within(i, "gymfleet.orchestrator")} == set()


@pytest.mark.parametrize("package", ["gymfleet.envs", "gymfleet.trainer"])
def test_no_import_circle_in(package: str) -> None:
    assert _circles(package) == []
