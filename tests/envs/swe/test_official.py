"""The official harness's verdict (issue 40): swebench's id mapping under both graders, its apply
commands, and `--compare` end to end on a finished run written here (a renamed pylint id that
rich would read as markup, an empty-patch run, an error on both sides, a different patch)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.envs.swe import patch as scripts
from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.graded_patch import graded_patch
from gymfleet.envs.swe.grading import grade_output
from gymfleet.envs.swe.instances import load_instances
from gymfleet.envs.swe.junit import parse_junit
from gymfleet.envs.swe.official import official_grade
from gymfleet.envs.swe.specs import load_spec

PUBLISHED = "tests/test_self.py::TestRunTC::test_stdin[/mymodule.py]"
RAN = "tests/test_self.py::TestRunTC::test_stdin[/testbed/tests/mymodule.py-mymodule-/testbed/tests/mymodule.py]"
OTHER = "tests/test_self.py::TestRunTC::test_version"
PYLINT = load_instances("fixtures")[0].model_copy(update={
    "instance_id": "pylint-dev__pylint-7080", "repo": "pylint-dev/pylint", "version": "2.15",
    "FAIL_TO_PASS": [PUBLISHED], "PASS_TO_PASS": [OTHER]})
OUTPUT = f"PASSED {RAN}\nPASSED {OTHER}\n"
JUNIT = ('<testsuites><testsuite><testcase classname="tests.test_self.TestRunTC" '
         f'name="{RAN.split("::")[-1]}"/><testcase classname="tests.test_self.TestRunTC" '
         'name="test_version"/></testsuite></testsuites>').encode()


def _log(output: str) -> str:
    c = upstream.constants()
    return f"+ : '{c.START_TEST_OUTPUT}'\n{output}+ : '{c.END_TEST_OUTPUT}'\n"


def test_a_renamed_id_resolves_under_both_graders() -> None:
    spec = load_spec(PYLINT.repo, PYLINT.version)
    official = official_grade(PYLINT, PYLINT.patch, _log(OUTPUT), spec)
    assert official.resolved and official.tests_status.FAIL_TO_PASS["success"] == [PUBLISHED]
    hardened = grade_output(OUTPUT, 0, PYLINT.FAIL_TO_PASS, PYLINT.PASS_TO_PASS, spec.parser(),
                            SimpleNamespace(instance_id=PYLINT.instance_id), junit=parse_junit(JUNIT),
                            require_junit=True)
    assert hardened.resolved, hardened


def test_the_official_apply_is_swebenchs_commands_in_order_without_resets() -> None:
    script = scripts.official_apply_script()
    commands = upstream.module("harness.run_evaluation").GIT_APPLY_CMDS
    positions = [script.index(f"if {c} {scripts.PATCH_PATH};") for c in commands]
    assert positions == sorted(positions) and len(commands) == 3
    assert "checkout" not in script and "clean" not in script


def _finished_run(tmp_path: Path) -> list[str]:
    """A run of four instances in the layout gymfleet writes; returns the CLI's --compare args."""
    c = upstream.constants()
    ids = ["renamed-1", "empty-1", "errored-1", "dropped-1"]
    rows = [PYLINT.model_copy(update={"instance_id": i}).row() for i in ids]
    preds = [{"instance_id": i, "model_name_or_path": "m", "model_patch": "" if i == "empty-1"
              else PYLINT.patch} for i in ids]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    run = tmp_path / "logs/run_evaluation/r/m"
    unresolved = {"resolved": False, "grading": "hardened", "tests_status": {
        g: {"success": [], "failure": [PUBLISHED]} for g in ("FAIL_TO_PASS", "PASS_TO_PASS")}}
    reports = {"renamed-1": unresolved, "empty-1": {**unresolved, "grading": "official"},
               "dropped-1": {**unresolved, "dropped_files": ["conftest.py"]}}
    logs = {"renamed-1": _log(OUTPUT), "empty-1": _log(f"FAILED {RAN}\n"),
            "errored-1": f"error: corrupt patch\n{c.APPLY_PATCH_FAIL}\n",
            "dropped-1": _log(OUTPUT)}
    for instance_id in ids:
        (run / instance_id).mkdir(parents=True)
        (run / instance_id / "test_output.txt").write_text(logs[instance_id])
        (run / instance_id / "run_instance.log").write_text("error: patch did not apply\n")
        if instance_id in reports:
            (run / instance_id / "report.json").write_text(json.dumps({instance_id: reports[instance_id]}))
    return ["eval", "swebench", "--dataset", str(tmp_path / "d.jsonl"), "--predictions",
            str(tmp_path / "p.jsonl"), "--run-id", "r", "--compare", str(tmp_path)]


def test_compare_end_to_end(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, _finished_run(tmp_path))
    assert result.exit_code == 0, result.output  # no MarkupError on `[/mymodule.py]`
    found = json.loads(result.stdout.strip().splitlines()[-1])
    # the empty-patch run is compared; the apply error is an error on both sides: agreeing
    assert found["compared"] == 4 and found["agree"] == 2, found
    differ = {d["instance_id"]: d for d in found["differences"]}
    assert differ["renamed-1"]["swebench"] == "resolved"
    assert any(PUBLISHED in r for r in differ["renamed-1"]["reasons"])
    assert PUBLISHED in result.output
    assert differ["dropped-1"]["swebench"] == "not graded"
    assert "different patch" in differ["dropped-1"]["reasons"][0]


# sphinx's pre-install edits (swebench's spec: `sed -i 's/Jinja2>=2.3/Jinja2<3.0/' setup.py`) are
# already in the instance's tree; a prediction written against the base commit that makes them
# again, beside its fix, is reverse-applied whole by swebench's third apply command
SETUP = "setup(install_requires=[\n    'Jinja2>=2.3',\n    'docutils',\n])\n"
FIX_BASE = "def width():\n    return 1\n"
PREDICTION = """\
diff --git a/setup.py b/setup.py
--- a/setup.py
+++ b/setup.py
@@ -1,4 +1,4 @@
 setup(install_requires=[
-    'Jinja2>=2.3',
+    'Jinja2<3.0',
     'docutils',
 ])
diff --git a/sphinx/util.py b/sphinx/util.py
--- a/sphinx/util.py
+++ b/sphinx/util.py
@@ -1,2 +1,2 @@
 def width():
-    return 1
+    return 2
"""


def _sphinx_like_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "testbed"
    (repo / "sphinx").mkdir(parents=True)
    (repo / "setup.py").write_text(SETUP)
    (repo / "sphinx/util.py").write_text(FIX_BASE)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    subprocess.run(["sed", "-i", "s/Jinja2>=2.3/Jinja2<3.0/", str(repo / "setup.py")], check=True)
    subprocess.run([*git, "commit", "-qam", "pre-install"], check=True)  # the image's start commit
    return repo


def _apply(script: str, repo: Path, patch: str) -> str:
    (repo.parent / "p.diff").write_text(patch)
    script = (script.replace(scripts.REPO_DIR, str(repo))
              .replace(scripts.PATCH_PATH, str(repo.parent / "p.diff"))
              .replace(scripts.WRITTEN_STAMP, str(repo.parent / "stamp")))
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60).stdout


def test_a_prediction_that_remakes_the_pre_install_edits_is_reverse_applied_officially(tmp_path: Path) -> None:
    c = upstream.constants()
    repo = _sphinx_like_repo(tmp_path)
    out = _apply(scripts.official_apply_script(), repo, PREDICTION)
    # git apply fails, --reject applies the fix and leaves it, `patch --batch` then finds every
    # hunk "previously applied" and reverses it: "applied", with the fix and the pin both undone
    assert c.APPLY_PATCH_PASS in out, out
    assert (repo / "sphinx/util.py").read_text() == FIX_BASE, out
    assert "Jinja2>=2.3" in (repo / "setup.py").read_text(), out
    # hardened: setup.py's block is dropped, the fix alone applies and stays
    repo = _sphinx_like_repo(tmp_path / "hardened")
    kept = graded_patch(PREDICTION, set())
    assert kept.dropped == ("setup.py",)
    out = _apply(scripts.apply_script(), repo, kept.patch)
    assert c.APPLY_PATCH_PASS in out and "return 2" in (repo / "sphinx/util.py").read_text(), out
    assert "Jinja2<3.0" in (repo / "setup.py").read_text()


def test_a_reset_between_attempts_writes_only_what_the_attempt_changed(tmp_path: Path) -> None:
    # an image's checkout has an index with stale stat data: a copy has new inodes. Before, the
    # reset after git apply failed rewrote every tracked file, and hardened grading called the
    # patch's apply a writer of files it does not name (CodeR's psf__requests-863: unresolved)
    built = _sphinx_like_repo(tmp_path)
    repo = tmp_path / "copy" / "testbed"
    shutil.copytree(built, repo, symlinks=True)
    for path in repo.rglob("*"):  # the image's files are older than the apply's stamp
        os.utime(path, (time.time() - 3600, time.time() - 3600), follow_symlinks=False)
    fuzzy = PREDICTION.split("diff --git a/sphinx")[1].replace(" def width():", " def width(x):")
    out = _apply(scripts.apply_script(), repo, "diff --git a/sphinx" + fuzzy)
    assert upstream.constants().APPLY_PATCH_PASS in out and "return 2" in (repo / "sphinx/util.py").read_text(), out
    listed = subprocess.run(["bash", "-c", scripts.written_files_command()
                             .replace(scripts.REPO_DIR, str(repo))
                             .replace(scripts.WRITTEN_STAMP, str(repo.parent / "stamp"))],
                            capture_output=True, text=True, timeout=60).stdout
    written = [p for p in scripts.parse_written_files(listed)
               if not p.startswith(".git/") and not p.endswith((".orig", ".rej"))]  # as the harness
    assert written == ["sphinx/util.py"], written
