"""What of a model patch is graded, which install side effects refuse a run, and ids that
cannot leave --output-dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.envs.swe.errors import InstanceLoadError
from gymfleet.envs.swe.graded_patch import graded_patch
from gymfleet.envs.swe.hooks import new_hooks
from gymfleet.envs.swe.instances import load_instances

SOURCE = ("diff --git a/src/pkg/core.py b/src/pkg/core.py\n--- a/src/pkg/core.py\n"
          "+++ b/src/pkg/core.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n")


def added(path: str, line: str = "x = 1") -> str:
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1 @@\n+{line}\n")


def test_files_that_steer_the_test_run_are_dropped_and_source_kept() -> None:
    steering = ["conftest.py", "tests/conftest.py", "setup.py", "pyproject.toml", "tox.ini",
                "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "setup.cfg", "src/evil.pth",
                "sitecustomize.py", "src/zz-1.0.dist-info/entry_points.txt", "src/zz.egg-info/PKG-INFO",
                "entry_points.txt", "tests/test_new.py", "test_repro.py", "tests/test_declared.py"]
    patch = SOURCE + "".join(added(p) for p in steering)
    graded = graded_patch(patch, {"tests/test_declared.py"})
    assert graded.patch == SOURCE
    assert list(graded.dropped) == steering


def test_plain_diffs_and_renames_are_split_too() -> None:
    plain = "--- a/conftest.py\n+++ b/conftest.py\n@@ -1 +1 @@\n-a\n+b\n" \
            "--- a/src/m.py\n+++ b/src/m.py\n@@ -1 +1 @@\n-a\n+b\n"
    graded = graded_patch(plain, set())
    assert graded.dropped == ("conftest.py",) and "src/m.py" in graded.patch
    rename = ("diff --git a/src/helper.py b/src/helper.py\nsimilarity index 100%\n"
              "rename from tests/helper.py\nrename to src/helper.py\n")
    assert graded_patch(rename, set()).dropped == ("tests/helper.py",)


def test_gold_patches_of_lite_lose_nothing(lite_rows) -> None:  # type: ignore[no-untyped-def]
    for row in lite_rows:
        graded = graded_patch(row["patch"], set())
        assert graded.dropped == () and graded.patch == row["patch"], row["instance_id"]


def test_an_install_that_adds_a_start_up_hook_is_caught() -> None:
    site = "/opt/venv/lib/python3.11/site-packages"
    finder = f"{site}/__editable___semver_3_0_2_finder.py"
    before = {f"{site}/distutils-precedence.pth": "import os; var = 1\n",
              f"{site}/__editable__.semver-3.0.2.pth":
                  "import __editable___semver_3_0_2_finder; "
                  "__editable___semver_3_0_2_finder.install()\n",
              finder: "abc"}
    assert new_hooks(before, dict(before)) == []
    relocated = {**before, f"{site}/_humanize.pth": "/testbed/src\n"}
    assert new_hooks(before, relocated) == []  # a path line runs nothing
    for path, value in ((f"{site}/zz_plugin.pth", "import evil\n"),
                        (f"{site}/sitecustomize.py", "123"), (finder, "changed"),
                        (f"{site}/pytest_hack.py", "456")):
        assert new_hooks(before, {**before, path: value}), path


@pytest.mark.parametrize("bad", ["../escape", "a/b", "..", ".hidden", "x\ny"])
def test_instance_ids_that_leave_the_output_dir_are_refused(tmp_path: Path, bad: str) -> None:
    fixture = load_instances("fixtures")[0].row()
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({**fixture, "instance_id": bad}) + "\n")
    with pytest.raises(InstanceLoadError, match="not a safe file name"):
        load_instances(data)
    result = CliRunner().invoke(app, ["eval", "swebench", "--dataset", str(data),
                                      "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "not a safe file name" in result.output
    assert not (tmp_path / "escape").exists() and not (tmp_path / "out").exists()


def test_a_run_id_that_leaves_the_output_dir_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", "swebench", "--run-id", "../x",
                                      "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 2 and "run_id" in result.output
    assert not (tmp_path / "x").exists()
