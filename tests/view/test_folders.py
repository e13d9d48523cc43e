"""A run's folders: files are named by root and relative path, and nothing leads out of them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gymfleet.view.artifacts import artifacts_of
from gymfleet.view.errors import ArtifactRefusedError, NotFoundError
from gymfleet.view.folders import FileRef, RunFolders


@pytest.fixture
def folders(tmp_path: Path) -> RunFolders:
    run = tmp_path / "runs" / "r"
    (run / "report").mkdir(parents=True)
    (run / "report" / "reward.png").write_bytes(b"\x89PNG")
    (run / "report" / "out.png").symlink_to("/etc/passwd")
    (run / "inside.png").symlink_to(run / "report" / "reward.png")
    shots = tmp_path / "shots" / "gymfleet_miniwob.click-test-2-v0" / "click-test-2@3"
    shots.mkdir(parents=True)
    for i in range(3):
        (shots / f"turn-{i:02d}.png").write_bytes(b"\x89PNG")
    (tmp_path / "secret.txt").write_text("secret")
    config = {"tasks": [{"name": "miniwob", "env_kwargs": {"screenshots_dir": str(tmp_path / "shots")}}]}
    return RunFolders.of("r", tmp_path / "runs", config)


def test_a_file_is_served_from_its_root(folders: RunFolders) -> None:
    path, media = folders.resolve("report", "reward.png")
    assert path.read_bytes() == b"\x89PNG" and media == "image/png"
    assert folders.resolve("run", "inside.png")[0].name == "reward.png"  # a symlink that stays inside
    assert folders.report_files() == [FileRef("report", "reward.png")]  # out.png leads out: not listed


@pytest.mark.parametrize("root, path", [
    ("run", "../../etc/passwd"), ("run", "../secret.txt"), ("run", "/etc/passwd"), ("report", "out.png"),
    ("run", "report/../../secret.txt"), ("nope", "x.png"), ("run", "store.db"), ("run", ""), ("run", "a\x00.png"),
    ("run", "..\\..\\secret.txt"), ("task0", "../../secret.txt"),
])
def test_paths_out_of_the_run_and_unserved_kinds_are_refused(folders: RunFolders, root: str, path: str) -> None:
    with pytest.raises(ArtifactRefusedError):
        folders.resolve(root, path)


def test_a_missing_file_is_not_found(folders: RunFolders) -> None:
    with pytest.raises(NotFoundError):
        folders.resolve("report", "heldout.png")


def test_a_browser_episode_lists_every_turn_s_screenshot(folders: RunFolders, tmp_path: Path) -> None:
    last = tmp_path / "shots" / "gymfleet_miniwob.click-test-2-v0" / "click-test-2@3" / "turn-02.png"
    found = artifacts_of({"screenshot_path": str(last), "raw_reward": 1.0}, folders)
    assert [(a.kind, a.ref) for a in found.files] == [
        ("screenshot", FileRef("task0", f"gymfleet_miniwob.click-test-2-v0/click-test-2@3/turn-{i:02d}.png")) for i in range(3)]
    assert found.grader == {"raw_reward": 1.0}


def test_paths_outside_the_run_are_named_never_served(folders: RunFolders, tmp_path: Path) -> None:
    found = artifacts_of({"screenshot_path": "/etc/passwd", "png_dir": "javascript:alert(1)",
                          "patch": "--- a\n+++ b\n", "close_error": "SandboxLostError: gone"}, folders)
    assert [a.ref for a in found.files] == [None, None, None]
    assert found.patch == "--- a\n+++ b\n" and found.infra == {"close_error": "SandboxLostError: gone"}


def test_slides_renders_and_their_deck(tmp_path: Path) -> None:
    deck = tmp_path / "runs" / "r" / "slides" / "brief-1-abc"
    deck.mkdir(parents=True)
    for name in ("slide-01.png", "slide-02.png", "deck.html"):
        (deck / name).write_text("x")
    found = artifacts_of({"volatile": {"png_dir": str(deck)}}, RunFolders.of("r", tmp_path / "runs", {}))
    assert [(a.kind, a.label) for a in found.files] == [
        ("slide", "slide-01.png"), ("slide", "slide-02.png"), ("text", "deck.html (source, as text)")]
    assert all(a.ref is not None and a.ref.root == "run" for a in found.files)
    assert os.path.basename(found.files[-1].path) == "deck.html"


def test_pictures_written_after_the_trajectory_are_marked_later(folders: RunFolders, tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    folder = tmp_path / "shots" / "gymfleet_miniwob.click-test-2-v0" / "click-test-2@3"
    old = datetime.now(UTC) - timedelta(minutes=5)
    os.utime(folder / "turn-00.png", (old.timestamp() - 60, old.timestamp() - 60))  # this rollout's own
    found = artifacts_of({"screenshot_path": str(folder / "turn-02.png")}, folders, stored_at=old)
    assert [a.later for a in found.files] == [False, True, True]
