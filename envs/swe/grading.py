"""Grades one test log against an instance's FAIL_TO_PASS / PASS_TO_PASS lists.

Parsing and the report come from swebench 4.1.0 (its per-repo log parsers,
``get_eval_tests_report`` and ``get_resolution_status``); this module wraps them where 4.1.0
grades wrongly, with the semantics swebench 5.x adopted (each fault is pinned by a test in
``tests/envs/swe/test_grading.py``):

1. A FAIL_TO_PASS test that was SKIPPED counted as resolved (4.1.0 puts it in neither list,
   so F2P is 0/0 = 1). Here it is a failure; a skipped PASS_TO_PASS test is maintained.
2. PASSED lines counted although the test command crashed (or a patch printed them). The
   eval script records the test command's exit status after the end marker
   (``>>>>> Test Exit Code: N``, as 5.x's ``record_test_exit_code``); a non-zero status with no
   FAILED/ERROR test in the log makes the log ungradable, an error.
3. pytest ids containing spaces: 4.1.0's parsers keep only the first whitespace token of the
   id, so distinct tests collapse into one key and the last one's status wins; the published
   data holds such ids truncated at the first space. Here summary lines are parsed with the
   whole id kept, and an expected id that is truncated (more ``[`` than ``]``) matches by prefix
   when every candidate agrees on pass-vs-fail (5.x ``grading._resolve_case``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gymfleet.envs.swe import upstream

TEST_EXIT_CODE = ">>>>> Test Exit Code"
"""Marker the eval script prints, after the end-of-output marker, with the test command's status."""
TEST_EXIT_CODE_RE = re.compile(rf"{re.escape(TEST_EXIT_CODE)}:\s*(-?\d+)")
_WITH_MESSAGE = {"FAILED", "ERROR", "XFAIL"}
_ID_SPACE = "\x00"  # stands for a space inside a test id while swebench's parser splits the line

LogParser = Callable[[str, Any], dict[str, str]]


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
        status_map: test id -> status as parsed from the log (whole ids).
        test_exit_code: the test command's exit status, when the log recorded one.
        error: why the log could not be graded, else None.
    """

    graded: bool
    resolved: bool
    resolution: str
    tests_status: TestsStatus
    status_map: dict[str, str]
    test_exit_code: int | None = None
    error: str | None = None


def parse_test_exit_code(log: str) -> int | None:
    """The exit status the eval script recorded after the test output, or None."""
    match = TEST_EXIT_CODE_RE.search(log)
    return int(match.group(1)) if match else None


def parse_status_map(log: str, parser: LogParser, spec: Any = None) -> dict[str, str]:
    """Runs swebench's ``parser`` over ``log`` keeping whole pytest ids (fault 3).

    Lines that start with a status word (``PASSED x``, ``FAILED x - msg``) have the spaces of
    their id (up to `` - ``) masked before the parser splits them, and restored after.

    Args:
        log: test output (the slice between the markers, or a whole log).
        parser: a swebench log parser ``(log, test_spec) -> {test id: status}``.
        spec: passed through to the parser (4.1.0's parsers ignore it, except a few that
            read ``spec.repo``/``spec.version``).
    """
    statuses = {s.value for s in upstream.constants().TestStatus}
    masked: list[str] = []
    for line in log.split("\n"):
        word, sep, rest = line.partition(" ")
        if sep and word in statuses:
            # pytest appends " - <message>" to FAILED/ERROR/XFAIL summary lines only
            ident, dash, tail = (
                rest.partition(" - ") if word in _WITH_MESSAGE else (rest, "", "")
            )
            line = f"{word} {ident.strip().replace(' ', _ID_SPACE)}{dash}{tail}"
        masked.append(line)
    raw = parser("\n".join(masked), spec)
    return {key.replace(_ID_SPACE, " "): status for key, status in raw.items()}


def resolve_case(case: str, status_map: dict[str, str]) -> str | None:
    """The status-map key for an expected test id (swebench 5.x ``_resolve_case``).

    Exact ids match exactly. An id truncated mid-parameter (more ``[`` than ``]``, as the
    published data truncates ids at the first space) matches the keys it prefixes when they
    all agree on pass-vs-fail; otherwise it matches nothing (and so fails).
    """
    if case in status_map:
        return case
    if case.count("[") > case.count("]"):
        matches = [k for k in status_map if k.startswith(case)]
        passing = {"PASSED", "XFAIL"}
        if matches and len({status_map[k] in passing for k in matches}) == 1:
            return matches[0]
    return None


def test_output(log: str) -> str | None:
    """The part of ``log`` between swebench's start and end markers, or None when absent."""
    c = upstream.constants()
    if c.START_TEST_OUTPUT not in log or c.END_TEST_OUTPUT not in log:
        return None
    return log.split(c.START_TEST_OUTPUT, 1)[1].split(c.END_TEST_OUTPUT, 1)[0]


def grade_log(
    log: str,
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    parser: LogParser,
    spec: Any = None,
) -> Grade:
    """Grades one eval log.

    Args:
        log: the whole eval log (with swebench's markers and the exit-code line).
        fail_to_pass: tests that must pass after the patch.
        pass_to_pass: tests that must keep passing.
        parser: the repo's swebench log parser.
        spec: passed to the parser.

    Returns:
        The :class:`Grade`; ``graded`` is False (with ``error``) for ungradable logs.
    """
    exit_code = parse_test_exit_code(log)
    error = _ungradable(log)
    status_map: dict[str, str] = {}
    if error is None:
        section = test_output(log) or ""
        status_map = parse_status_map(section, parser, spec) or parse_status_map(log, parser, spec)
        error = _check_status_map(status_map, exit_code)
    if error is not None:
        empty: dict[str, list[str]] = {"success": [], "failure": []}
        return Grade(False, False, "RESOLVED_NO", TestsStatus(dict(empty), dict(empty)),
                     status_map, exit_code, error)
    effective = _effective_statuses(status_map, fail_to_pass, pass_to_pass)
    g = upstream.grading()
    report = g.get_eval_tests_report(
        effective, {"FAIL_TO_PASS": fail_to_pass, "PASS_TO_PASS": pass_to_pass}
    )
    resolution = g.get_resolution_status(report)
    tests = TestsStatus(**{k: report[k] for k in ("FAIL_TO_PASS", "PASS_TO_PASS",
                                                 "FAIL_TO_FAIL", "PASS_TO_FAIL")})
    return Grade(True, resolution == "RESOLVED_FULL", resolution, tests, status_map, exit_code)


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


def _check_status_map(status_map: dict[str, str], exit_code: int | None) -> str | None:
    if not status_map:
        return f"the log has no test results (test command exit code {exit_code})"
    failing = any(s in ("FAILED", "ERROR") for s in status_map.values())
    if exit_code not in (None, 0) and not failing:
        return (
            f"the test command exited {exit_code} but the log reports no failing test: "
            "the run crashed or the output is not from the real test run"
        )
    return None


def _effective_statuses(
    status_map: dict[str, str], fail_to_pass: list[str], pass_to_pass: list[str]
) -> dict[str, str]:
    """Status of each expected id after truncated-id matching and skip semantics, so that
    swebench 4.1.0's exact-match ``get_eval_tests_report`` grades it as 5.x would."""
    effective: dict[str, str] = {}
    for cases, skipped_means in ((fail_to_pass, "FAILED"), (pass_to_pass, "PASSED")):
        for case in cases:
            key = resolve_case(case, status_map)
            if key is not None:
                status = status_map[key]
                effective[case] = skipped_means if status == "SKIPPED" else status
    return effective
