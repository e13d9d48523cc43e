"""SWE-v0 reads the agent's diff with git settings of its own (issue 42): a repository's
``diff.external``, ``diff.noprefix`` or colors never change the diff the env grades. Runs the
env's own commands on a scratch repository with the real git."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gymfleet.envs.swe import patch as scripts


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, timeout=60).stdout


def test_the_agents_git_config_does_not_change_the_graded_diff(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "x.py").write_text("a = 1\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    fake = tmp_path / "fake-diff.sh"
    fake.write_text("#!/bin/sh\necho 'diff --git a/conftest.py b/conftest.py'\n")
    fake.chmod(0o755)
    for key, value in (("diff.external", str(fake)), ("diff.noprefix", "true"),
                       ("color.ui", "always"), ("diff.mnemonicPrefix", "true")):
        _git(repo, "config", key, value)
    (repo / "x.py").write_text("a = 2\n")

    def run(command: str) -> str:
        return subprocess.run(["bash", "-c", command.replace(scripts.REPO_DIR, str(repo))],
                              check=True, capture_output=True, text=True, timeout=60).stdout

    assert run(scripts.changed_files_command(base)).split("\0") == ["x.py", ""]
    diff = run(scripts.diff_command(base, ["x.py"]))
    assert diff.startswith("diff --git a/x.py b/x.py\n") and "conftest" not in diff
    assert "\x1b[" not in diff and "+a = 2\n" in diff
