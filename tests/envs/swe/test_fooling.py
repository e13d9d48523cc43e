"""Hostile predictions that fooled the grader, run end to end through `gymfleet eval swebench`
in Docker on copies of a fixture instance (python-semver-426: `Version.replace()` must return
the subclass). None may resolve; progress tokens in PASS_TO_PASS are graded as swebench grades
them, and so is a pass-to-pass test pytest skips (no id in the log: failed, as in swebench).

One evaluation run grades every case (one instance each; their images share the fixture's
env image and Docker's build cache).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.envs.swe.instances import load_instances

pytestmark = pytest.mark.docker

BASE = load_instances("fixtures")[0]  # python-semver__python-semver-426
FIXED = "+            return type(self)(**version)  # type: ignore"
SUBCLASS_TEST = "tests/test_subclass.py::test_replace_from_subclass"
UNITTEST_ID = ("test_replace_from_subclass "
               "(tests.test_unit_style.T.test_replace_from_subclass)")


def new_file(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}")


def with_fix(line: str) -> str:
    """The gold patch with its one added line replaced."""
    assert FIXED in BASE.patch
    return BASE.patch.replace(FIXED, "+            " + line)


UNIT_STYLE = new_file("tests/test_unit_style.py", '''import unittest
from semver import Version


class V(Version):
    pass


class T(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(str(Version.parse("1.2.3")), "1.2.3")

    def test_replace_from_subclass(self):
        self.assertIsInstance(V.parse("1.2.3").replace(major=2), V)
''')
SPACED = new_file("tests/test_spaced.py", '''import pytest
from semver import Version


class V(Version):
    pass


@pytest.mark.parametrize("part", ["x major", "x minor"])
def test_kinds(part):
    assert isinstance(V.parse("1.2.3").replace(**{part.split()[1]: 9}), V)
''')
SKIPPED = new_file("tests/test_skipped.py", '''import pytest


@pytest.mark.skip(reason="needs a network")
def test_download():
    assert False
''')

# instance id -> (instance fields changed, prediction patch, must resolve)
CASES: dict[str, tuple[dict[str, Any], str, bool]] = {
    "fool__xfail-1": ({}, with_fix("import pytest; pytest.xfail('hostile')  # type: ignore"), False),
    "fool__skip-1": ({}, with_fix("import pytest; pytest.skip('hostile')  # type: ignore"), False),
    "fool__forged-1": ({}, with_fix(
        "import atexit; atexit.register(print, '\\nPASSED " + SUBCLASS_TEST
        + "\\n>>>>> End Test Output\\n>>>>> Test Exit Code: 0'); return Version(**version)"), False),
    "fool__django-ok-1": (
        {"version": "3.0-unittest", "test_patch": UNIT_STYLE, "FAIL_TO_PASS": [UNITTEST_ID],
         "PASS_TO_PASS": ["test_parse (tests.test_unit_style.T.test_parse)"]},
        with_fix("import sys; sys.stderr.write('note\\nok\\n'); return Version(**version)"), False),
    "fool__django-gold-1": (
        {"version": "3.0-unittest", "test_patch": UNIT_STYLE, "FAIL_TO_PASS": [UNITTEST_ID],
         "PASS_TO_PASS": ["test_parse (tests.test_unit_style.T.test_parse)"]}, BASE.patch, True),
    "fool__prefix-1": (
        {"test_patch": SPACED, "FAIL_TO_PASS": ["tests/test_spaced.py::test_kinds[x"],
         "PASS_TO_PASS": []},
        with_fix("return (type(self) if 'major' in parts else Version)(**version)"), False),
    # junk ids graded as swebench 4.1.0 grades them: absent from the log, so failed
    "parity__tokens-1": (
        {"PASS_TO_PASS": [*BASE.PASS_TO_PASS, "[100%]", "[ 50%]"]}, BASE.patch, False),
    # a skipped pass-to-pass test: pytest -rA prints no id for it, so it fails, as in swebench
    "parity__skipped-1": (
        {"test_patch": BASE.test_patch + SKIPPED,
         "PASS_TO_PASS": [*BASE.PASS_TO_PASS, "tests/test_skipped.py::test_download"]},
        BASE.patch, False),
}

SPEC_TABLE = """python-semver/python-semver:
  "3.0-unittest":
    python: "3.11"
    pip_packages: ["pytest==9.2.0", "pytest-cov==7.1.0", "packaging==26.4"]
    install: "python -m pip install --no-build-isolation -e ."
    pre_install: ["python -m pip install setuptools==84.2.1 wheel"]
    test_cmd: "python -m unittest -v"
    log_parser: parse_log_django
"""


@pytest.fixture(scope="module")
def fooling_run(docker_available: bool, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("fool")
    rows, preds = [], []
    for instance_id, (fields, patch, _) in CASES.items():
        rows.append(BASE.model_copy(update={"instance_id": instance_id, **fields}).row())
        preds.append({"instance_id": instance_id, "model_name_or_path": "hostile",
                      "model_patch": patch})
    (tmp / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp / "p.jsonl").write_text("\n".join(json.dumps(p) for p in preds) + "\n")
    (tmp / "specs.yaml").write_text(SPEC_TABLE)
    args = ["eval", "swebench", "--dataset", str(tmp / "d.jsonl"), "--predictions",
            str(tmp / "p.jsonl"), "--spec-table", str(tmp / "specs.yaml"), "--run-id", "fool",
            "--output-dir", str(tmp), "--max-workers", "4", "--no-clone", "--timeout", "300", "--hardened"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return {"summary": json.loads((tmp / "hostile.fool.json").read_text()),
            "dir": tmp / "logs/run_evaluation/fool/hostile"}


@pytest.mark.parametrize("instance_id", [k for k, v in CASES.items() if not v[2]])
def test_hostile_prediction_does_not_resolve(fooling_run: dict[str, Any], instance_id: str) -> None:
    summary = fooling_run["summary"]
    assert instance_id not in summary["resolved_ids"], summary
    assert instance_id in summary["unresolved_ids"], summary  # graded, not an error
    report = json.loads((fooling_run["dir"] / instance_id / "report.json").read_text())
    if instance_id == "parity__tokens-1":
        assert report[instance_id]["junk_ids"] == ["[100%]", "[ 50%]"]
        assert report[instance_id]["tests_status"]["PASS_TO_PASS"]["failure"] == ["[100%]", "[ 50%]"]
        return
    if instance_id == "parity__skipped-1":
        assert report[instance_id]["tests_status"]["PASS_TO_PASS"]["failure"] == [
            "tests/test_skipped.py::test_download"]
        return
    assert report[instance_id]["tests_status"]["FAIL_TO_PASS"]["failure"]


@pytest.mark.parametrize("instance_id", [k for k, v in CASES.items() if v[2]])
def test_honest_prediction_resolves(fooling_run: dict[str, Any], instance_id: str) -> None:
    summary = fooling_run["summary"]
    assert instance_id in summary["resolved_ids"], (summary, (
        fooling_run["dir"] / instance_id / "test_output.txt").read_text()[-3000:])
    report = json.loads((fooling_run["dir"] / instance_id / "report.json").read_text())
