"""The instance image's prune (issue 40): a mirror with objects missing further back in the base
commit's history no longer breaks the build at ``git gc``; the future stays pruned. Runs the
image script's lines with the real git on a scratch repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gymfleet.envs.swe.image_scripts import prune_lines


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t",
                           *args], check=True, capture_output=True, text=True, timeout=60).stdout


def test_a_partial_history_is_cut_at_the_base_and_the_future_pruned(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    for n, text in enumerate(["old\n", "base\n", "fix\n"]):
        (repo / "x.py").write_text(text)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"c{n}")
    old, base, fix = _git(repo, "rev-list", "--reverse", "HEAD").split()
    _git(repo, "tag", "v0", old)
    old_blob = _git(repo, "rev-parse", f"{old}:x.py").strip()
    loose = repo / ".git/objects" / old_blob[:2] / old_blob[2:]
    loose.unlink()  # a partial mirror: history before the base lacks an object
    _git(repo, "checkout", "-q", "-f", base)
    _git(repo, "checkout", "-q", "-b", "main")
    _git(repo, "branch", "-D", "master") if "master" in _git(repo, "branch") else None
    _git(repo, "reflog", "expire", "--expire=now", "--all")
    plain = subprocess.run(["git", "gc", "-q", "--prune=now"], cwd=repo, capture_output=True,
                           text=True, timeout=60)
    assert plain.returncode != 0  # what broke the build before
    run = subprocess.run(["bash", "-c", "set -euo pipefail\n" + "\n".join(prune_lines())],
                         cwd=repo, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "history before the base commit is incomplete" in run.stdout
    assert _git(repo, "rev-parse", "HEAD").strip() == base
    assert (repo / "x.py").read_text() == "base\n"
    gone = subprocess.run(["git", "cat-file", "-e", fix], cwd=repo, capture_output=True, timeout=60)
    assert gone.returncode != 0  # the fix's commit is pruned
