"""A third-party env package (tests/envs/plugin: its own pyproject, a ``gymfleet.envs`` entry
point, one ~70-line env on SandboxEnv) installed the way pip installs it, found by the registry
and passing ``gymfleet envs check`` in a fresh process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN_DIR = Path(__file__).parent / "plugin"
ENV_ID = "filesdemo/Files-v0"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin installed (with its dist-info and entry point) into a folder put on PYTHONPATH."""
    site, source = tmp_path_factory.mktemp("plugin-site"), tmp_path_factory.mktemp("plugin-src") / "plugin"
    shutil.copytree(PLUGIN_DIR, source)  # the build writes build/ and egg-info next to the sources
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(source)],
        check=True, capture_output=True, cwd=source,
    )
    assert list(site.glob("gymfleet_files_demo-*.dist-info/entry_points.txt"))
    return site


def _gymfleet(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "gymfleet.cli", *args], env=env, capture_output=True,
                          text=True, timeout=600)


def test_the_registry_lists_the_plugin_env(plugin_site: Path) -> None:
    listed = _gymfleet(plugin_site, "envs", "list", "--namespace", "filesdemo")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == [ENV_ID]


@pytest.mark.parametrize("sandbox", [pytest.param("local", marks=pytest.mark.bwrap),
                                     pytest.param("docker", marks=pytest.mark.docker)])
def test_the_plugin_env_passes_check_env(plugin_site: Path, sandbox: str, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue("bwrap_available" if sandbox == "local" else "docker_available")
    checked = _gymfleet(plugin_site, "envs", "check", ENV_ID, "--instances", "3", "--env-arg", f"sandbox={sandbox}")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"ok {ENV_ID}: 3 instance(s)" in checked.stdout
    # piped, the verdict is one line (before, cut at 80 columns)
    assert any(line.startswith(f"ok {ENV_ID}") and line.endswith(" s)") for line in checked.stdout.splitlines())


def test_an_unknown_id_exits_2(plugin_site: Path) -> None:
    checked = _gymfleet(plugin_site, "envs", "check", "filesdemo/Nope-v0")
    assert checked.returncode == 2 and "unknown env id" in checked.stdout, checked.stdout + checked.stderr
