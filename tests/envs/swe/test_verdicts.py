"""Verdicts equal swebench 4.1.0's where it is right (junk ids, no results), and a run that did
not finish, or whose log the JUnit report does not back, never resolves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.grading import grade_output, ungraded
from gymfleet.envs.swe.junit import junit_key, parse_junit, reports_for, runs_pytest

PARSER = upstream.log_parser("parse_log_pytest")


def row(lite_rows: list[dict[str, Any]], instance_id: str) -> dict[str, Any]:
    return next(r for r in lite_rows if r["instance_id"] == instance_id)


def swebench_report(output: str, f2p: list[str], p2p: list[str]) -> dict[str, Any]:
    g = upstream.grading()
    return g.get_eval_tests_report(PARSER(output, None), {"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p})


def test_junk_ids_of_pytest_5227_are_graded_as_swebench_grades_them(lite_rows) -> None:  # type: ignore[no-untyped-def]
    r = row(lite_rows, "pytest-dev__pytest-5227")
    f2p, p2p = json.loads(r["FAIL_TO_PASS"]), json.loads(r["PASS_TO_PASS"])
    real = [t for t in [*f2p, *p2p] if not t.startswith("[")]
    # the gold run's log: every test passes; a pytest run inside a test printed these lines
    output = "\n".join([*(f"PASSED {t}" for t in real), "FAILED [100%]", "PASSED [100%]",
                        "PASSED [", "PASSED [100%]------------------------------"])
    upstream_report = swebench_report(output, f2p, p2p)
    assert upstream.grading().get_resolution_status(upstream_report) == "RESOLVED_FULL"
    grade = grade_output(output, 0, f2p, p2p, PARSER)
    assert grade.resolved, grade.tests_status
    assert grade.tests_status.PASS_TO_PASS == upstream_report["PASS_TO_PASS"]
    assert set(grade.junk_ids) == {"[", "[100%]", "[100%]------------------------------"}
    # and a junk id absent from the log fails, as in swebench
    missing = grade_output(output.replace("PASSED [\n", ""), 0, f2p, p2p, PARSER)
    assert not missing.resolved and "[" in missing.tests_status.PASS_TO_PASS["failure"]


def test_a_run_without_results_is_unresolved_with_every_test_failed() -> None:
    f2p, p2p = ["t.py::test_fix"], ["t.py::test_old"]
    for output, code in (("ImportError: boom\n", 2), ("PASSED t.py::test_fix\n", 1)):
        grade = grade_output(output, code, f2p, p2p, PARSER)
        assert not grade.graded and not grade.resolved and grade.error
        assert grade.resolution == "RESOLVED_NO"
        assert grade.tests_status.FAIL_TO_PASS == {"success": [], "failure": f2p}
        assert grade.tests_status.PASS_TO_PASS == {"success": [], "failure": p2p}
    assert ungraded(f2p, p2p, "why").tests_status.FAIL_TO_PASS["failure"] == f2p


def test_forged_lines_and_os_exit_leave_no_junit_report_and_never_resolve() -> None:
    f2p, p2p = ["t.py::test_fix"], ["t.py::test_old"]
    forged = "PASSED t.py::test_fix\nPASSED t.py::test_old\nFAILED t.py::test_unrelated\n"
    assert grade_output(forged, 1, f2p, p2p, PARSER).resolved  # the log alone is fooled
    grade = grade_output(forged, 1, f2p, p2p, PARSER, junit=None, require_junit=True)
    assert not grade.resolved and "JUnit" in (grade.error or "")


def test_a_log_line_the_junit_report_does_not_back_fails_the_test() -> None:
    f2p, p2p = ["t.py::test_fix"], ["t.py::test_old"]
    output = "PASSED t.py::test_fix\nPASSED t.py::test_old\n"
    junit = {("t", "test_old"): ["PASSED"], ("t", "test_fix"): ["FAILED"]}
    assert not grade_output(output, 0, f2p, p2p, PARSER, junit=junit).resolved
    assert not grade_output(output, 0, f2p, p2p, PARSER, junit={("t", "test_old"): ["PASSED"]},
                            require_junit=True).resolved
    junit[("t", "test_fix")] = ["PASSED"]
    assert grade_output(output, 0, f2p, p2p, PARSER, junit=junit, require_junit=True).resolved


def test_junit_keys_match_a_real_pytest_run(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "test_x.py").write_text(
        "import pytest\n"
        "class TestC:\n    def test_m(self):\n        pass\n"
        "@pytest.mark.parametrize('p', ['a b', 'x::y'])\ndef test_p(p):\n    assert p != 'x::y'\n"
        "@pytest.mark.skip\ndef test_s():\n    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
                          "--junitxml=out/j.xml", "pkg/test_x.py"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    reports = parse_junit((tmp_path / "out/j.xml").read_bytes())
    assert reports is not None
    expect = {"pkg/test_x.py::TestC::test_m": ["PASSED"], "pkg/test_x.py::test_p[a b]": ["PASSED"],
              "pkg/test_x.py::test_p[x::y]": ["FAILED"], "pkg/test_x.py::test_s": ["SKIPPED"]}
    for node_id, statuses in expect.items():
        assert reports_for(node_id, reports) == statuses, (node_id, reports, run.stdout)
    assert reports_for("pkg/test_x.py::test_p[", reports) == ["PASSED", "FAILED"]
    assert junit_key("a/b/test_x.py::C::t[p::q]") == ("a.b.test_x.C", "t[p::q]")


def test_junit_is_asked_of_pytest_commands_only() -> None:
    assert runs_pytest("pytest -rA") and runs_pytest("python -m pytest -rA")
    assert not runs_pytest("tox --current-env -epy39 -v --")
    assert not runs_pytest("./tests/runtests.py --verbosity 2")
    assert parse_junit(b"not xml") is None
    assert parse_junit(b'<!DOCTYPE x [<!ENTITY a "b">]><x/>') is None
