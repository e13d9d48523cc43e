"""The distribution maps the three top-level folders into the gymfleet namespace."""

from __future__ import annotations

import importlib
import subprocess
import sys
import zipfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOTS = {"gymfleet": "gymfleet", "envs": "gymfleet.envs", "orchestrator": "gymfleet.orchestrator",
         "trainer": "gymfleet.trainer"}


def _declared_packages() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(pyproject["tool"]["setuptools"]["packages"])


def test_every_package_folder_is_listed() -> None:
    declared = _declared_packages()
    found = set()
    for folder, package in ROOTS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]) if rel.parts else package)
    missing = found - declared
    assert not missing, f"add these to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"


def test_namespace_imports_from_the_folders() -> None:
    for folder, package in ROOTS.items():
        module = importlib.import_module(package)
        assert Path(module.__file__).parent == ROOT / folder


def test_wheel_installs_nothing_named_envs_or_trainer(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True,
    )
    (wheel,) = tmp_path.glob("gymfleet-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert "gymfleet" in tops
    assert not tops & {"envs", "trainer", "orchestrator", "tests", "benchmarks"}, tops
    names = zipfile.ZipFile(wheel).namelist()
    assert "gymfleet/envs/base.py" in names and "gymfleet/envs/registry.py" in names
    assert {"gymfleet/core/errors.py", "gymfleet/core/records.py", "gymfleet/core/sampling.py"} <= set(names)


def test_core_is_declared() -> None:
    assert "gymfleet.core" in _declared_packages()
