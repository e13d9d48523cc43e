"""One trajectory's files, followed by import from ``gymfleet train`` to the bucket: at most 12, and
the README's code map names exactly those (issue 44).

The walk is the README map's list, checked against the code: it starts at ``gymfleet train``'s
module, every later file is imported (at any depth of the file, through the packages' lazy faces)
by a file before it, and it holds each station where the code does something to the trajectory,
found by the name defined there: the job, the run's composition, the scheduler, the rollout, the
gateway that stamps its tokens, the store that keeps it, the learner's loop that claims it, the
learner that trains on it and the bucket its version goes to.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"gymfleet": "gymfleet", "envs": "gymfleet.envs", "orchestrator": "gymfleet.orchestrator",
           "trainer": "gymfleet.trainer"}
ENTRY = "gymfleet/cli/train.py"
STATIONS = {
    "run_job": ("gymfleet", "the job's stages"), "open_run": ("gymfleet", "the run composed"),
    "Scheduler": ("orchestrator", "the sample admitted"), "Rollout": ("orchestrator", "the episode played"),
    "Gateway": ("orchestrator", "its tokens stamped"), "TrajectoryStore": ("orchestrator", "the trajectory kept"),
    "learn": ("trainer", "its group claimed by the learner's loop"), "Learner": ("trainer", "trained on"),
    "AdapterBucket": ("trainer", "the version published"),
}
"""Names whose defining file the trajectory passes: the folder that defines each, what happens to it there."""
MOST_FILES = 12


def _module_of(path: str) -> str:
    top, _, rest = path.partition("/")
    parts = [FOLDERS[top], *rest.removesuffix(".py").split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _path_of(module: str) -> Path | None:
    for folder, package in FOLDERS.items():
        if module == package or module.startswith(package + "."):
            rest = module[len(package):].lstrip(".").replace(".", "/")
            for candidate in (ROOT / folder / f"{rest}.py", ROOT / folder / rest / "__init__.py"):
                if rest and candidate.is_file() or not rest and candidate.name == "__init__.py" and candidate.is_file():
                    return candidate
    return None


@cache
def _tree(module: str) -> ast.Module | None:
    path = _path_of(module)
    return ast.parse(path.read_text()) if path else None


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if _path_of(module).name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _lazy_exports(module: str) -> dict[str, str]:
    """A face's ``_EXPORTS = {name: ".submodule"}`` (names loaded on first use)."""
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            return {k.value: module + v.value for k, v in zip(node.value.keys, node.value.values)}
    return {}


@cache
def defining_module(module: str, name: str) -> str:
    """The module that defines ``name`` as seen from ``module`` (through faces and re-exports)."""
    tree = _tree(module)
    if tree is None:
        return module
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return module
    lazy = _lazy_exports(module)
    if name in lazy:
        return defining_module(lazy[name], name)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return defining_module(_absolute(module, node), name)
    if _path_of(f"{module}.{name}"):  # a submodule
        return f"{module}.{name}"
    return module


def imported_modules(module: str) -> set[str]:
    """Every gymfleet module ``module`` imports, at any depth of the file, names resolved to where
    they are defined."""
    found = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            if _path_of(source):
                found |= {defining_module(source, a.name) for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if _path_of(a.name)}
    return found


def _defined_in(folder: str, name: str) -> str:
    """The one module of ``folder`` that defines ``name`` at its top level."""
    found = []
    for path in (ROOT / folder).rglob("*.py"):
        tree = ast.parse(path.read_text())
        if any(isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body):
            found.append(_module_of(str(path.relative_to(ROOT))))
    assert len(found) == 1, f"{name} is defined in {found or 'no module'} of {folder}/"
    return found[0]


def _map_files() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Code map", 1)[1].split("\n## ", 1)[0].split("From Python", 1)[0]
    named = re.findall(r"`([\w/]+\.py)`", section)
    return list(dict.fromkeys(f for f in named if f.partition("/")[0] in FOLDERS))  # not this test's own path


def test_the_readme_map_is_one_trajectorys_walk_by_import_through_at_most_12_files() -> None:
    files = _map_files()
    modules = [_module_of(f) for f in files]
    assert files[0] == ENTRY, f"the map starts at {files[0]}, not at `gymfleet train` ({ENTRY})"
    for i, module in enumerate(modules[1:], 1):
        importers = [m for m in modules[:i] if module in imported_modules(m)]
        assert importers, f"{files[i]} is not imported by any file before it in the map ({files[:i]})"
    where = {name: _defined_in(folder, name) for name, (folder, _) in STATIONS.items()}
    missing = {name: module for name, module in where.items() if module not in modules}
    assert not missing, f"the map leaves out where the trajectory is {[STATIONS[n][1] for n in missing]}: {missing}"
    assert len(files) <= MOST_FILES, files


def test_the_walk_resolves_names_through_the_lazy_faces() -> None:
    assert defining_module("gymfleet.orchestrator", "TrajectoryStore") == "gymfleet.orchestrator.store.store"
    assert defining_module("gymfleet.trainer", "learn") == "gymfleet.trainer.worker"
    assert "gymfleet.orchestrator.scheduler" in imported_modules("gymfleet.run.compose")
    assert "gymfleet.run.job" in imported_modules("gymfleet.cli.train")  # imports inside functions count
