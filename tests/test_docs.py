"""The map is in the repository: docs and READMEs name files that exist, nothing points outside the
clone, and every top-level folder has a README listing its modules."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"`([A-Za-z0-9_./-]+/[A-Za-z0-9_.-]+\.(?:py|md|yaml|sh|toml))`")


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines() if line.endswith((".py", ".md", ".yaml", ".toml"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_files_a_doc_names_exist(doc: Path) -> None:
    missing = [m for m in PATH.findall(doc.read_text())
               if not (ROOT / m).exists() and not (doc.parent / m).exists() and not m.startswith(("mypkg", "~"))]
    assert not missing, f"{doc.relative_to(ROOT)} names files that do not exist: {missing}"


def test_nothing_points_outside_the_clone() -> None:
    offenders = [str(p.relative_to(ROOT)) for p in _tracked()
                 if p.exists() and p != Path(__file__) and ("shared/DESIGN.md" in p.read_text() or "(DESIGN.md" in p.read_text())]
    assert not offenders, f"these cite the design note outside the repository (use docs/design.md): {offenders}"


@pytest.mark.parametrize("folder", ["gymfleet", "gymfleet/core", "gymfleet/run", "gymfleet/cli", "envs", "envs/swe", "orchestrator",
                                    "trainer", "images", "tests", "benchmarks", "configs", "scripts", "docs"])
def test_each_folder_has_a_readme_listing_its_modules(folder: Path) -> None:
    readme = ROOT / folder / "README.md"
    assert readme.is_file(), f"{folder}/ has no README.md"
    text = readme.read_text()
    for module in sorted((ROOT / folder).glob("*.py")):
        if module.name != "__init__.py" or folder in ("gymfleet",):
            assert module.name in text, f"{folder}/README.md does not list {module.name}"


def test_the_orchestrator_readme_lists_each_module_once() -> None:
    lines = [line for line in (ROOT / "orchestrator" / "README.md").read_text().splitlines() if line.lstrip().startswith("- `")]
    names = [line.split("`")[1] for line in lines]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
