"""Grading of small logs: swebench 4.1.0's faults pinned, and gymfleet's wrapper fixing them."""

from __future__ import annotations

from gymfleet.envs.swe import upstream
from gymfleet.envs.swe import grading
from gymfleet.envs.swe.grading import grade_log, grade_output, parse_status_map, resolve_case

START = "+ : '>>>>> Start Test Output'"
END = "+ : '>>>>> End Test Output'"


def log(*lines: str, exit_code: int | None = 0) -> str:
    tail = [] if exit_code is None else [f">>>>> Test Exit Code: {exit_code}"]
    return "\n".join(["+ git apply -v -", START, *lines, END, *tail]) + "\n"


def pytest_parser():  # type: ignore[no-untyped-def]
    return upstream.log_parser("parse_log_pytest")


def upstream_resolved(status_map: dict[str, str], f2p: list[str], p2p: list[str]) -> bool:
    """What swebench 4.1.0's own report says for a status map."""
    g = upstream.grading()
    report = g.get_eval_tests_report(status_map, {"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p})
    return g.get_resolution_status(report) == "RESOLVED_FULL"


# ---- fault 1: a skipped FAIL_TO_PASS test counted as passing ------------------------------

def test_skipped_fail_to_pass_is_resolved_by_swebench_4_but_not_here() -> None:
    text = log("SKIPPED tests/t.py::test_fix", "PASSED tests/t.py::test_old")
    f2p, p2p = ["tests/t.py::test_fix"], ["tests/t.py::test_old"]
    raw = pytest_parser()(text, None)
    assert raw["tests/t.py::test_fix"] == "SKIPPED"
    assert upstream_resolved(raw, f2p, p2p), "swebench 4.1.0 fault no longer reproduces"
    grade = grade_log(text, f2p, p2p, pytest_parser())
    assert grade.graded and not grade.resolved
    assert grade.tests_status.FAIL_TO_PASS == {"success": [], "failure": f2p}


def test_skipped_pass_to_pass_is_maintained() -> None:
    text = log("PASSED tests/t.py::test_fix", "SKIPPED tests/t.py::test_old")
    grade = grade_log(text, ["tests/t.py::test_fix"], ["tests/t.py::test_old"], pytest_parser())
    assert grade.resolved
    assert grade.tests_status.PASS_TO_PASS["success"] == ["tests/t.py::test_old"]


def test_a_pass_to_pass_test_skipped_without_its_id_fails_as_in_swebench() -> None:
    # pytest -rA names a skipped test only as `SKIPPED [N] file:line: reason`: swebench (4.1.0 and
    # 5.0.2) finds no id and fails it. Before, gymfleet counted it as maintained, so a patch that
    # broke a pass-to-pass test and made it skip at run time (pytest.skip() in the code under
    # test) resolved; the JUnit report, which names it, must not supply the missing id either.
    text = log("PASSED tests/t.py::test_fix", "SKIPPED [1] tests/t.py:9: hostile")
    f2p, p2p = ["tests/t.py::test_fix"], ["tests/t.py::test_old"]
    assert not upstream_resolved(pytest_parser()(text, None), f2p, p2p)
    grade = grade_log(text, f2p, p2p, pytest_parser())
    assert grade.graded and not grade.resolved
    assert grade.tests_status.PASS_TO_PASS == {"success": [], "failure": p2p}
    junit = {("tests.t", "test_fix"): ["PASSED"], ("tests.t", "test_old"): ["SKIPPED"]}
    assert not grade_output(grading.test_output(text) or "", 0, f2p, p2p, pytest_parser(), junit=junit,
                            require_junit=True).resolved


# ---- fault 2: PASSED lines counted although the test command crashed ----------------------

def test_passed_lines_of_a_crashed_run_are_not_graded() -> None:
    text = log("PASSED tests/t.py::test_fix", "PASSED tests/t.py::test_old",
               "Fatal Python error: Segmentation fault", exit_code=139)
    f2p, p2p = ["tests/t.py::test_fix"], ["tests/t.py::test_old"]
    assert upstream_resolved(pytest_parser()(text, None), f2p, p2p)
    grade = grade_log(text, f2p, p2p, pytest_parser())
    assert not grade.graded and not grade.resolved
    assert grade.test_exit_code == 139
    assert "exited 139" in (grade.error or "")


def test_non_zero_exit_with_failing_tests_is_graded() -> None:
    text = log("FAILED tests/t.py::test_fix - AssertionError: no", "PASSED tests/t.py::test_old",
               exit_code=1)
    grade = grade_log(text, ["tests/t.py::test_fix"], ["tests/t.py::test_old"], pytest_parser())
    assert grade.graded and not grade.resolved
    assert grade.tests_status.FAIL_TO_PASS["failure"] == ["tests/t.py::test_fix"]


def test_log_without_results_is_not_graded() -> None:
    grade = grade_log(log("pytest: error: unrecognized arguments: -x", exit_code=4), ["a"], [], pytest_parser())
    assert not grade.graded and "no test results" in (grade.error or "")


# ---- fault 3: pytest ids with spaces, truncated at the first space in published data -----

SPACED = [
    "PASSED tests/test_number.py::test_metric[[1000, '', 0]-1 k]",
    "FAILED tests/test_number.py::test_metric[[1000, '', 3]-1.00 k] - AssertionError: x - y",
    "PASSED tests/test_number.py::test_metric[[1, 'Hz']-1.00 Hz]",
    "PASSED tests/test_number.py::test_metric[[1, 'Hz', 2]-1.0 Hz]",
]


def test_swebench_4_parser_collapses_ids_at_the_first_space() -> None:
    raw = pytest_parser()("\n".join(SPACED), None)
    # two distinct tests became one key and the second one's status hides the first's
    assert raw["tests/test_number.py::test_metric[[1000,"] == "FAILED"
    assert len(raw) == 2


def test_whole_ids_are_kept() -> None:
    status = parse_status_map("\n".join(SPACED), pytest_parser())
    assert status == {
        "tests/test_number.py::test_metric[[1000, '', 0]-1 k]": "PASSED",
        "tests/test_number.py::test_metric[[1000, '', 3]-1.00 k]": "FAILED",
        "tests/test_number.py::test_metric[[1, 'Hz']-1.00 Hz]": "PASSED",
        "tests/test_number.py::test_metric[[1, 'Hz', 2]-1.0 Hz]": "PASSED",
    }


def test_truncated_published_id_matches_when_candidates_agree() -> None:
    f2p = ["tests/test_number.py::test_metric[[1,"]  # as published: cut at the first space
    grade = grade_log(log(*SPACED, exit_code=1), f2p, [], pytest_parser())
    assert grade.resolved, grade.tests_status


def test_truncated_published_id_fails_when_candidates_disagree() -> None:
    f2p = ["tests/test_number.py::test_metric[[1000,"]
    grade = grade_log(log(*SPACED, exit_code=1), f2p, [], pytest_parser())
    assert not grade.resolved
    assert grade.tests_status.FAIL_TO_PASS["failure"] == f2p


def test_exact_matching_fails_a_gold_log_that_whole_id_matching_resolves() -> None:
    gold = [line.replace("FAILED", "PASSED").split(" - ")[0] for line in SPACED]
    f2p = ["tests/test_number.py::test_metric[[1000,", "tests/test_number.py::test_metric[[1,"]
    full_parser = upstream.log_parser("parse_log_pytest_v2")
    # a parser keeping whole ids (5.x's pytest_v2 does) + exact matching: the gold log fails
    whole = parse_status_map("\n".join(gold), full_parser)
    assert not upstream_resolved(whole, f2p, [])
    assert grade_log(log(*gold), f2p, [], full_parser).resolved


def test_resolve_case_is_exact_for_whole_ids() -> None:
    status = {"t.py::test[a b]": "PASSED"}
    assert resolve_case("t.py::test[a b]", status) == "t.py::test[a b]"
    assert resolve_case("t.py::test[a", status) == "t.py::test[a b]"
    assert resolve_case("t.py::test", status) is None  # balanced brackets: no prefix match


# ---- markers ---------------------------------------------------------------------------

def test_markers_of_failed_runs_make_the_log_ungradable() -> None:
    c = upstream.constants()
    for marker, why in ((c.APPLY_PATCH_FAIL, "did not apply"), (c.TESTS_TIMEOUT, "timed out")):
        grade = grade_log(log("PASSED a") + marker, ["a"], [], pytest_parser())
        assert not grade.graded and why in (grade.error or "")
    grade = grade_log("PASSED a\n", ["a"], [], pytest_parser())
    assert not grade.graded and "markers" in (grade.error or "")


def test_missing_fail_to_pass_test_is_a_failure_and_only_passed_counts() -> None:
    text = log("XFAIL t.py::test_x - reason", "PASSED t.py::test_y", "PASSED t.py::test_z")
    f2p = ["t.py::test_x", "t.py::test_gone", "t.py::test_z"]
    # swebench 4.1.0 counts an XFAIL fail-to-pass test as a success
    assert upstream_resolved({"t.py::test_x": "XFAIL", "t.py::test_y": "PASSED"},
                             ["t.py::test_x"], ["t.py::test_y"])
    grade = grade_log(text, f2p, ["t.py::test_y"], pytest_parser())
    assert grade.resolution == "RESOLVED_PARTIAL"
    assert grade.tests_status.FAIL_TO_PASS == {"success": ["t.py::test_z"],
                                               "failure": ["t.py::test_x", "t.py::test_gone"]}
