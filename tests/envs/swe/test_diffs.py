"""One patch parser for every diff form (issue 42): git's quoted headers, context diffs, Index:
lines and unified hunks whose lines look like headers. The filter drops a steering file in each
form, and what git and ``patch`` apply of the graded patch is exactly the kept blocks (checked with
the real tools on a scratch repository)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gymfleet.envs.swe.diffs import parse_diff, unquote
from gymfleet.envs.swe.graded_patch import graded_patch

SOURCE = """diff --git a/src/x.py b/src/x.py
--- a/src/x.py
+++ b/src/x.py
@@ -1,2 +1,2 @@
--- not a header
+++ not a header either
 keep
"""
QUOTED = '''diff --git "a/con\\146test.py" "b/conftest.py"
new file mode 100644
--- /dev/null
+++ "b/conftest.py"
@@ -0,0 +1 @@
+import os
'''
CONTEXT = """*** a/conftest.py	2024-01-01 00:00:00
--- b/conftest.py	2024-01-01 00:00:00
***************
*** 0 ****
--- 1 ----
+ import os
"""
COVERAGERC = """diff --git a/.coveragerc b/.coveragerc
new file mode 100644
--- /dev/null
+++ b/.coveragerc
@@ -0,0 +1,2 @@
+[run]
+plugins = zz_plugin
"""
INDEX = """Index: tox.ini
===================================================================
--- tox.ini
+++ tox.ini
@@ -1 +1 @@
-[tox]
+[tox] # changed
"""


def test_unquote_reads_git_c_quoting() -> None:
    assert unquote('"a/con\\146test.py"') == "a/conftest.py"
    assert unquote('"a/\\303\\251t\\303\\251 x\\t.py"') == "a/été x\t.py"
    assert unquote("a/x.py\t2024-01-01 00:00:00") == "a/x.py"


def test_hunk_lines_that_look_like_headers_stay_in_their_block() -> None:
    blocks = parse_diff(SOURCE + QUOTED)
    assert [b.text for b in blocks] == [SOURCE, QUOTED]
    assert "src/x.py" in blocks[0].paths and "conftest.py" in blocks[1].paths


@pytest.mark.parametrize("form", [QUOTED, CONTEXT, COVERAGERC, INDEX],
                         ids=["git-quoted", "context", "coveragerc", "index-line"])
def test_a_steering_file_is_dropped_in_every_diff_form(form: str) -> None:
    graded = graded_patch(SOURCE + form, set())
    assert graded.patch == SOURCE
    assert graded.dropped and all(not p.startswith(("a/", "b/")) for p in graded.dropped)
    assert "src/x.py" in graded.names


def test_text_outside_any_block_is_never_applied() -> None:
    graded = graded_patch("some garbage\nmore\n" + SOURCE, set())
    assert graded.patch == SOURCE


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src/x.py").write_text("-- not a header\nkeep\n")
    (repo / "tox.ini").write_text("[tox]\n")
    for cmd in (["init", "-q"], ["add", "-A"],
                ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, timeout=60)
    return repo


@pytest.mark.parametrize("command", [["git", "apply", "--verbose"],
                                     ["patch", "--batch", "--fuzz=5", "-p1", "-i"]])
def test_the_tools_apply_only_what_the_filter_kept(tmp_path: Path, command: list[str]) -> None:
    """Before one parser, the quoted header and the context diff slipped through the filter and
    `patch` wrote conftest.py; now both tools write exactly src/x.py."""
    repo = _repo(tmp_path)
    graded = graded_patch(SOURCE + QUOTED + CONTEXT + INDEX, set())
    (tmp_path / "p.diff").write_text(graded.patch)
    subprocess.run([*command, str(tmp_path / "p.diff")], cwd=repo, check=True, timeout=60,
                   capture_output=True)
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo,
                            capture_output=True, text=True, check=True, timeout=60).stdout
    assert status.split() == ["M", "src/x.py"]
    assert set(graded.dropped) == {"conftest.py", "tox.ini"}
