"""Repositories from a mirror directory (bundles, clones) and the no-GitHub error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gymfleet.envs.swe.errors import RepoNotFoundError
from gymfleet.envs.swe.instances import FIXTURE_MIRROR, load_instances
from gymfleet.envs.swe.repos import RepoSource


def test_mirror_layouts_are_found(tmp_path: Path) -> None:
    (tmp_path / "me" / "proj.git").mkdir(parents=True)
    (tmp_path / "you__lib").mkdir()
    source = RepoSource([tmp_path], allow_clone=False)
    assert source.locate("me/proj") == str(tmp_path / "me" / "proj.git")
    assert source.locate("you/lib") == str(tmp_path / "you__lib")
    assert RepoSource([], allow_clone=True).locate("a/b") == "https://github.com/a/b.git"
    with pytest.raises(RepoNotFoundError, match="not in the mirror"):
        source.locate("nobody/none")


def test_clone_from_the_fixture_bundle_at_a_commit(tmp_path: Path) -> None:
    inst = load_instances("fixtures")[0]
    RepoSource([FIXTURE_MIRROR], allow_clone=False).clone(inst.repo, tmp_path / "r", inst.base_commit)
    head = subprocess.run(["git", "-C", str(tmp_path / "r"), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert head == inst.base_commit
    with pytest.raises(RepoNotFoundError, match="failed"):
        RepoSource([FIXTURE_MIRROR], allow_clone=False).clone(inst.repo, tmp_path / "s", "f" * 40)


def test_a_partial_mirror_is_named_in_one_line_before_any_build(tmp_path: Path) -> None:
    repo = tmp_path / "me__proj"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.py").write_text("a = 1\n")
    (repo / "b.py").write_text("b = 2\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    source = RepoSource([tmp_path], allow_clone=False)
    source.check_tree("me/proj", commit)  # complete: no error
    blob = subprocess.run([*git, "rev-parse", "HEAD:b.py"], capture_output=True, text=True,
                          check=True).stdout.strip()
    (repo / ".git/objects" / blob[:2] / blob[2:]).unlink()
    with pytest.raises(RepoNotFoundError) as err:
        source.check_tree("me/proj", commit)
    message = str(err.value)
    assert blob in message and "(b.py)" in message and "\n" not in message
    with pytest.raises(RepoNotFoundError, match="cannot list the tree"):
        source.check_tree("me/proj", "f" * 40)
