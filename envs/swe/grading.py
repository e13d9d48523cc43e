"""Grades one test run against an instance's FAIL_TO_PASS / PASS_TO_PASS lists.

The report comes from swebench 4.1.0 (``get_eval_tests_report``, ``get_resolution_status``) fed
with one status per expected test, decided here from every status the log reported for it
(:mod:`gymfleet.envs.swe.logparse`), so that a patch cannot earn resolved without the fix:

1. FAIL_TO_PASS counts only PASSED: XFAIL, XPASS, SKIPPED (code raising pytest's xfail or skip
   at run time) fail it. PASS_TO_PASS follows swebench's skip rule (4.1.0's outcome, 5.0.2's
   ``test_maintained``): a test the log reports, by id, as PASSED, XFAIL or SKIPPED is
   maintained; one the log does not report by id is failed. pytest's ``SKIPPED [N] file:line``
   summary lines name no test, so a P2P test pytest skips under ``-rA`` fails, as in swebench
   (a patch can make tests skip at run time; a summary line could hide a broken one). A JUnit
   report only narrows: it never supplies an id the log lacks.
2. Any non-passing report of an id fails it, whatever the order of lines: a forged ``PASSED``
   line (or a printed ``ok`` in a Django log) cannot cover the runner's FAILED. A published id
   cut at a space (more ``[`` than ``]``) matches every id it prefixes, and all must pass.
3. The test output and the exit status come from the harness (:func:`grade_output`: the test
   command ran as its own sandbox exec), never from markers in the log, which the code under
   test can print; a non-zero exit status with no failing test makes the run ungradable
   (swebench 5.x: a crash, or output that is not the real run's).
4. Junk ids in published lists (``[``, ``[100%]``, ``[100%]-----``: pieces of progress output
   that name no test) are graded as swebench 4.1.0 grades them: an exact key of its parser's
   map, last line wins. The prefix rule of 2. would let ``[`` gather every ``[...`` line.
5. No test results, or a crashed test command: unresolved with every expected test failed,
   as swebench 4.1.0 grades an empty map (not an error: the patch is what broke the run).

:func:`grade_log` grades a log in swebench's layout (markers, ``>>>>> Test Exit Code``) for
regrading saved logs; it trusts the markers, so the harness does not use it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.canary import Canary, canary_error, without_canary
from gymfleet.envs.swe.junit import JunitReports, reports_for
from gymfleet.envs.swe.logparse import (
    LogParser,
    Occurrences,
    is_junk_id,
    parse_occurrences,
)

TEST_EXIT_CODE = ">>>>> Test Exit Code"
"""Marker written after the end-of-output marker with the test command's status (5.x layout)."""
TEST_EXIT_CODE_RE = re.compile(rf"{re.escape(TEST_EXIT_CODE)}:\s*(-?\d+)")
_PASSING = {"PASSED"}
_MAINTAINED = {"PASSED", "SKIPPED", "XFAIL"}
_FAILING = {"FAILED", "ERROR"}


@dataclass(frozen=True)
class TestsStatus:
    """Per-test outcome in swebench's layout (``tests_status`` of ``report.json``)."""

    FAIL_TO_PASS: dict[str, list[str]]
    PASS_TO_PASS: dict[str, list[str]]
    FAIL_TO_FAIL: dict[str, list[str]] = field(
        default_factory=lambda: {"success": [], "failure": []}
    )
    PASS_TO_FAIL: dict[str, list[str]] = field(
        default_factory=lambda: {"success": [], "failure": []}
    )

    def as_dict(self) -> dict[str, dict[str, list[str]]]:
        """The four groups as plain dicts (what ``report.json`` holds)."""
        return {
            "FAIL_TO_PASS": self.FAIL_TO_PASS,
            "PASS_TO_PASS": self.PASS_TO_PASS,
            "FAIL_TO_FAIL": self.FAIL_TO_FAIL,
            "PASS_TO_FAIL": self.PASS_TO_FAIL,
        }


@dataclass(frozen=True)
class Grade:
    """The outcome of grading one log.

    Attributes:
        graded: False when the log cannot be graded (no markers, patch or test-run failure
            marker, crashed test command, no test results); ``error`` says why.
        resolved: every FAIL_TO_PASS test passed and every PASS_TO_PASS test was maintained.
        resolution: swebench's ``RESOLVED_FULL`` / ``RESOLVED_PARTIAL`` / ``RESOLVED_NO``.
        tests_status: per-test detail (empty lists when not graded).
        status_map: test id -> the status it was graded with (its worst report).
        test_exit_code: the test command's exit status, when known.
        error: why the log could not be graded, else None.
        junk_ids: entries of the published lists that name no test (``[``, ``[100%]``),
            graded by swebench's exact-key rule.
    """

    graded: bool
    resolved: bool
    resolution: str
    tests_status: TestsStatus
    status_map: dict[str, str]
    test_exit_code: int | None = None
    error: str | None = None
    junk_ids: tuple[str, ...] = ()


def parse_test_exit_code(log: str) -> int | None:
    """The exit status a swebench-layout log recorded after the test output (last one), or None."""
    found = TEST_EXIT_CODE_RE.findall(log)
    return int(found[-1]) if found else None


def parse_status_map(log: str, parser: LogParser, spec: Any = None) -> dict[str, str]:
    """Each id's worst reported status (see :func:`worst`), whole pytest ids kept."""
    return {key: worst(statuses) for key, statuses in parse_occurrences(log, parser, spec).items()}


def worst(statuses: list[str]) -> str:
    """The status an id is graded with: ERROR/FAILED if any report says so, else XFAIL/SKIPPED
    if any, else PASSED."""
    for status in ("ERROR", "FAILED", "XPASS", "XFAIL", "SKIPPED"):
        if status in statuses:
            return status
    return statuses[-1] if statuses else "FAILED"


def matching_reports(case: str, found: Occurrences) -> list[str] | None:
    """Every status reported for an expected id: exact ids match exactly; an id cut mid-parameter
    (more ``[`` than ``]``, as published data cuts ids at a space) gathers the reports of every
    id it prefixes. None when nothing matches."""
    if case in found:
        return found[case]
    if case.count("[") > case.count("]"):
        reports = [s for key, statuses in found.items() if key.startswith(case) for s in statuses]
        return reports or None
    return None


def resolve_case(case: str, status_map: dict[str, str]) -> str | None:
    """The status-map key an expected id grades against (exact, or the first id it prefixes
    when cut mid-parameter); None when none matches."""
    if case in status_map:
        return case
    if case.count("[") > case.count("]"):
        return next((k for k in status_map if k.startswith(case)), None)
    return None


def test_output(log: str) -> str | None:
    """The part of a swebench-layout ``log`` between the start and end markers, or None."""
    c = upstream.constants()
    if c.START_TEST_OUTPUT not in log or c.END_TEST_OUTPUT not in log:
        return None
    return log.split(c.START_TEST_OUTPUT, 1)[1].split(c.END_TEST_OUTPUT, 1)[0]


def grade_output(output: str, exit_code: int | None, fail_to_pass: list[str],
                 pass_to_pass: list[str], parser: LogParser, spec: Any = None,
                 junit: JunitReports | None = None, require_junit: bool = False,
                 canary: Canary | None = None) -> Grade:
    """Grades the output of one test command run.

    Args:
        output: what the test command printed (stdout and stderr), and nothing else.
        exit_code: its exit status as the harness saw it (None when unknown).
        fail_to_pass: tests that must pass after the patch.
        pass_to_pass: tests that must keep passing (junk ids are graded as swebench does).
        parser: the repo's swebench log parser.
        spec: passed to the parser.
        junit: pytest's JUnit report of the run (:mod:`gymfleet.envs.swe.junit`); when given,
            a test passes only if the log and the report both say so.
        require_junit: the run was asked for a JUnit report; without one (``junit`` None) the
            session never finished (``os._exit``, a crash) and nothing it printed counts.
        canary: the canary planted in the run, if any; its tests must read exactly as planted
            in the log and ``junit``, and are not graded.

    Returns:
        The :class:`Grade`. A run with no test results, or one that crashed (non-zero exit, no
        failing test), is graded unresolved with every expected test failed (swebench 4.1.0
        grades an empty status map so); ``graded`` is then False and ``error`` says why.
    """
    junk = tuple(c for c in [*fail_to_pass, *pass_to_pass] if is_junk_id(c))
    f2p = [c for c in fail_to_pass if not is_junk_id(c)]
    p2p = [c for c in pass_to_pass if not is_junk_id(c)]
    everything = parse_occurrences(output, parser, spec)
    found, own_junit = without_canary(canary, everything, junit)
    status_map = {key: worst(statuses) for key, statuses in found.items()}
    error = _check_status_map(status_map, exit_code, canary_fails=canary is not None)
    if error is None and require_junit and junit is None:
        error = ("pytest left no JUnit report: the test session did not finish (os._exit or a "
                 "crash), so the lines it printed are not results")
    if error is None and canary is not None:
        error = canary_error(canary, everything, junit)
    junit = own_junit
    effective: dict[str, str] = {}
    if error is None:
        effective = _effective_statuses(found, f2p, p2p, junit)
        effective.update(_junk_statuses(output, junk, parser, spec))
    return _report(effective, fail_to_pass, pass_to_pass, error, status_map, exit_code, junk)


def ungraded(fail_to_pass: list[str], pass_to_pass: list[str], why: str,
             exit_code: int | None = None) -> Grade:
    """An unresolved grade with every expected test failed, for a run whose results cannot be
    trusted (``why`` becomes its ``error``)."""
    junk = tuple(c for c in [*fail_to_pass, *pass_to_pass] if is_junk_id(c))
    return _report({}, fail_to_pass, pass_to_pass, why, {}, exit_code, junk)


def _report(effective: dict[str, str], fail_to_pass: list[str], pass_to_pass: list[str],
            error: str | None, status_map: dict[str, str], exit_code: int | None,
            junk: tuple[str, ...]) -> Grade:
    """swebench's report over one status per expected id (:func:`_effective_statuses`)."""
    g = upstream.grading()
    report = g.get_eval_tests_report(
        effective, {"FAIL_TO_PASS": list(fail_to_pass), "PASS_TO_PASS": list(pass_to_pass)})
    resolution = g.get_resolution_status(report) if error is None else "RESOLVED_NO"
    tests = TestsStatus(**{k: report[k] for k in ("FAIL_TO_PASS", "PASS_TO_PASS",
                                                 "FAIL_TO_FAIL", "PASS_TO_FAIL")})
    return Grade(error is None, resolution == "RESOLVED_FULL", resolution, tests, status_map,
                 exit_code, error, junk)


def _junk_statuses(output: str, junk: tuple[str, ...], parser: LogParser,
                   spec: Any) -> dict[str, str]:
    """Junk ids (no test name: ``[``, ``[100%]-----``) graded exactly as swebench 4.1.0's
    ``get_eval_report`` grades them: looked up as whole keys in its parser's own map."""
    if not junk:
        return {}
    upstream_map = parser(output, spec)
    return {case: upstream_map[case] for case in junk if case in upstream_map}


def grade_log(log: str, fail_to_pass: list[str], pass_to_pass: list[str], parser: LogParser,
              spec: Any = None) -> Grade:
    """Grades a whole log in swebench's layout (markers, patch/timeout markers, the exit-code
    line); for saved logs. It trusts what the log says, so it is not used on live runs."""
    error = _ungradable(log)
    if error is not None:
        empty: dict[str, list[str]] = {"success": [], "failure": []}
        return Grade(False, False, "RESOLVED_NO", TestsStatus(dict(empty), dict(empty)), {},
                     parse_test_exit_code(log), error)
    return grade_output(test_output(log) or "", parse_test_exit_code(log), fail_to_pass,
                        pass_to_pass, parser, spec)


def _ungradable(log: str) -> str | None:
    c = upstream.constants()
    for marker, why in (
        (c.APPLY_PATCH_FAIL, "the patch did not apply"),
        (c.RESET_FAILED, "the repository could not be reset"),
        (c.TESTS_TIMEOUT, "the test run timed out"),
        (c.TESTS_ERROR, "the test run errored"),
    ):
        if marker in log:
            return why
    if test_output(log) is None:
        return "the log lacks the start/end test output markers (the eval script did not run)"
    return None


def _check_status_map(status_map: dict[str, str], exit_code: int | None,
                      canary_fails: bool = False) -> str | None:
    """Why the results cannot be graded (none, or a crash), else None. ``canary_fails``: the
    run held the grader's canary, whose failing tests make pytest exit 1 (checked apart)."""
    if not status_map:
        return f"the log has no test results (test command exit code {exit_code})"
    failing = any(s in _FAILING for s in status_map.values())
    if exit_code not in (None, 0) and not failing and not (canary_fails and exit_code == 1):
        return (
            f"the test command exited {exit_code} but the log reports no failing test: "
            "the run crashed or the output is not from the real test run"
        )
    return None


def _reports(case: str, found: Occurrences, junit: JunitReports | None) -> list[str] | None:
    """Every status the log and the JUnit report give ``case``; None when the log does not
    report it (swebench reads the log only; the JUnit report never supplies a missing id). A
    log report the JUnit report does not back counts as FAILED."""
    reports = matching_reports(case, found)
    if reports is None or junit is None:
        return reports
    backed = reports_for(case, junit)
    return [*reports, *(backed if backed is not None else ["FAILED"])]


def _effective_statuses(found: Occurrences, fail_to_pass: list[str], pass_to_pass: list[str],
                        junit: JunitReports | None = None) -> dict[str, str]:
    """One status per expected id for swebench's exact-match report: F2P is PASSED only when
    every report of it (log and JUnit) is PASSED; P2P is PASSED when every report is
    PASSED/SKIPPED/XFAIL (swebench 5.0.2's ``test_maintained``). An id the log does not report
    gets no status, which swebench's report counts as a failure."""
    effective: dict[str, str] = {}
    for case in fail_to_pass:
        reports = _reports(case, found, junit)
        if reports is not None:
            effective[case] = "PASSED" if set(reports) <= _PASSING else "FAILED"
    for case in pass_to_pass:
        reports = _reports(case, found, junit)
        if reports is not None:
            effective[case] = "PASSED" if set(reports) <= _MAINTAINED else "FAILED"
    return effective
