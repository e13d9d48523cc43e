"""`benchmarks/swe_sweep.py --dry-run` reads what the build reads (issue 40): a
``requirements.txt`` spec whose requirements file the mirror lacks at the setup commit is not
counted provisionable, and one that has it is."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

from gymfleet.envs.swe.harness import SWEHarness, SWEHarnessConfig
from gymfleet.envs.swe.instances import load_instances

ROOT = Path(__file__).resolve().parents[3]


def _sweep_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("swe_sweep", ROOT / "benchmarks/swe_sweep.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mirror(tmp_path: Path, files: dict[str, str]) -> str:
    repo = tmp_path / "mirror/acme__widget"
    repo.mkdir(parents=True)
    run = lambda *a: subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t",  # noqa: E731
                                     "-c", "user.name=t", *a], check=True, capture_output=True,
                                    text=True, timeout=60).stdout
    run("init", "-q")
    for name, text in {"setup.py": "", **files}.items():
        (repo / name).write_text(text)
    run("add", "-A")
    run("commit", "-qm", "setup")
    return run("rev-parse", "HEAD").strip()


def _classify(tmp_path: Path, files: dict[str, str]) -> str:
    commit = _mirror(tmp_path, files)
    (tmp_path / "specs.yaml").write_text(
        "acme/widget:\n  '1.0': {python: '3.11', packages: requirements.txt, test_cmd: pytest}\n")
    harness = SWEHarness(SWEHarnessConfig(repo_mirrors=[tmp_path / "mirror"], allow_clone=False,
                                          spec_tables=[tmp_path / "specs.yaml"]))
    instance = load_instances("fixtures")[0].model_copy(update={
        "instance_id": "acme__widget-1", "repo": "acme/widget", "version": "1.0",
        "base_commit": commit, "environment_setup_commit": commit})
    return _sweep_module().classify(harness, instance)


def test_a_requirements_spec_without_its_file_is_not_provisionable(tmp_path: Path) -> None:
    why = _classify(tmp_path, {})
    assert why.startswith("requirements.txt spec: none of requirements.txt can be read"), why


def test_a_requirements_spec_with_its_file_is_provisionable(tmp_path: Path) -> None:
    assert _classify(tmp_path, {"requirements.txt": "six\n"}) == "ok"
