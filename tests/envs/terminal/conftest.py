"""Fixtures of the terminal env tests: backends (fake, bubblewrap) and tiny task folders."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gymfleet.envs.sandbox.base import SandboxBackend
from gymfleet.envs.sandbox.local import LocalBackend, LocalBackendConfig
from tests.envs.terminal.fake_sandbox import FakeBackend

PASSING_RUN_SH = """\
#!/bin/bash
exec python3 -I "$GYMFLEET_TEST_DIR/checks.py"
"""
CHECK_FILE_PY = """\
import os, sys, unittest
sys.path.insert(0, os.environ["GYMFLEET_TEST_DIR"])
import gymfleet_testlib

class Checks(unittest.TestCase):
    def test_done(self):
        with open("done.txt") as fh:
            self.assertEqual(fh.read().strip(), "yes")

if __name__ == "__main__":
    gymfleet_testlib.main()
"""


def write_task(root: Path, task_id: str, *, yaml: str = "", run_sh: str = PASSING_RUN_SH,
               checks: str = CHECK_FILE_PY, solution: str = "echo yes > done.txt",
               setup: str | None = None) -> Path:
    """A task folder under ``root``: by default 'write yes to done.txt', checked by unittest."""
    folder = root / task_id
    (folder / "tests").mkdir(parents=True)
    (folder / "task.yaml").write_text(yaml or "instruction: Write yes to done.txt.\nmax_agent_turns: 5\n")
    (folder / "solution.sh").write_text(solution)
    (folder / "tests" / "run.sh").write_text(textwrap.dedent(run_sh))
    (folder / "tests" / "checks.py").write_text(checks)
    if setup is not None:
        (folder / "setup.sh").write_text(setup)
    return folder


@pytest.fixture
def fake_backend() -> FakeBackend:
    """Unisolated subprocess sandboxes in temp dirs (tests only)."""
    return FakeBackend()


@pytest.fixture
def tasks_dir(tmp_path: Path) -> Path:
    """A tasks folder with one tiny task, ``done``."""
    write_task(tmp_path, "done")
    return tmp_path


@pytest.fixture(scope="session")
def local_backend(bwrap_available: bool, tmp_path_factory: pytest.TempPathFactory) -> LocalBackend:
    """The bubblewrap backend, records in a temp folder (fails in CI when bwrap is missing)."""
    state = tmp_path_factory.mktemp("terminal-local-state")
    backend = LocalBackend(LocalBackendConfig(state_dir=state, allow_unisolated=False))
    assert backend.bwrap_works()
    return backend


@pytest.fixture(scope="session")
def docker_backend(terminal_image: str) -> SandboxBackend:
    """The Docker backend, once the terminal image is built (fails in CI without a daemon)."""
    from gymfleet.envs.sandbox.docker import DockerBackend

    return DockerBackend()
