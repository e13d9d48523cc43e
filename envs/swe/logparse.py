"""Test logs -> every status each test id was reported with (not only the last one).

swebench's parsers return ``{test id: status}`` where the last line about a test wins, so a line
the code under test prints can overwrite the test runner's verdict. Here the log is parsed with
swebench's parser for the repo, whole and line by line, and every reported status of an id is
kept (:data:`Occurrences`); grading then lets any non-passing report fail the id, so the grade
does not depend on the order of lines. On top of swebench's parsers:

* pytest summary lines keep whole ids with spaces (swebench 4.1.0 cuts the id at its first space,
  so parametrised ids sharing a prefix collapse into one key);
* Django/unittest logs: the ``FAIL: <test>`` / ``ERROR: <test>`` headers of the failure report
  and bare ``FAIL``/``ERROR`` verdict lines count against the whole test name (swebench keys the
  header by the first word and credits a printed ``ok`` line to the previous test);
* pytest's ``SKIPPED [N] path:line: reason`` summary lines name no test and give none (as
  swebench 5.0.2's parsers skip them);
* sympy logs: the verdict of each file's last test, which ``bin/test --verbose`` prints on the
  line that ends with the file's ``[OK]``/``[FAIL]`` (swebench's parser misses it; such a test
  is in no published list, but the grader's canary can be there).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from gymfleet.envs.swe import upstream

Occurrences = dict[str, list[str]]
"""test id -> every status the log reported for it, in log order."""
LogParser = Callable[[str, Any], dict[str, str]]


_WITH_MESSAGE = {"FAILED", "ERROR", "XFAIL"}
_ID_SPACE = "\x00"  # stands for a space inside a test id while swebench's parser splits the line
_SKIPPED_SUMMARY = re.compile(r"^SKIPPED \[(\d+)\] ([^\s:]+):\d+(?::|$)")
_UNITTEST_HEADER = re.compile(r"^(FAIL|ERROR): (.+?)\s*$")
_UNITTEST_DOTS = " ... "
_LINE_PARSERS = {"parse_log_pytest", "parse_log_pytest_options", "parse_log_pytest_v2"}
_SYMPY_LAST = re.compile(r"^(test_\w+) (ok|F|E)\s+\[(?:OK|FAIL)\]$")
_SYMPY_STATUS = {"ok": "PASSED", "F": "FAILED", "E": "ERROR"}


def mask_id_spaces(log: str) -> str:
    """Hides the spaces inside ids of pytest summary lines (``PASSED a.py::t[x y]``) so that
    swebench's whitespace split keeps the whole id; :func:`unmask` restores them."""
    statuses = {s.value for s in upstream.constants().TestStatus}
    masked: list[str] = []
    for line in log.split("\n"):
        word, sep, rest = line.partition(" ")
        if sep and word in statuses and not _SKIPPED_SUMMARY.match(line):
            # pytest appends " - <message>" to FAILED/ERROR/XFAIL summary lines only
            ident, dash, tail = rest.partition(" - ") if word in _WITH_MESSAGE else (rest, "", "")
            line = f"{word} {ident.strip().replace(' ', _ID_SPACE)}{dash}{tail}"
        masked.append(line)
    return "\n".join(masked)


def unmask(key: str) -> str:
    """An id as it was before :func:`mask_id_spaces`."""
    return key.replace(_ID_SPACE, " ")


def parse_occurrences(log: str, parser: LogParser, spec: Any = None) -> Occurrences:
    """Every status each test id was reported with.

    Args:
        log: the test command's output.
        parser: the repo's swebench log parser ``(log, test_spec) -> {id: status}``.
        spec: passed through to the parser.
    """
    masked = mask_id_spaces(log)
    found: Occurrences = defaultdict(list)
    for key, status in parser(masked, spec).items():
        found[unmask(key)].append(status)
    if getattr(parser, "__name__", "") in _LINE_PARSERS:
        for line in masked.split("\n"):
            for key, status in parser(line, spec).items():
                found[unmask(key)].append(status)
    for key, status in unittest_verdicts(log):
        found[key].append(status)
    if getattr(parser, "__name__", "") == "parse_log_sympy":
        for key, status in sympy_last_verdicts(log):
            found[key].append(status)
    return dict(found)


def sympy_last_verdicts(log: str) -> list[tuple[str, str]]:
    """The verdict of each file's last test in a sympy ``bin/test --verbose`` log: the line
    ``test_x ok   [OK]`` (or ``F``/``E``, ``[FAIL]``) that swebench's parser does not read."""
    found = [_SYMPY_LAST.match(raw.strip()) for raw in log.split("\n")]
    return [(m.group(1), _SYMPY_STATUS[m.group(2)]) for m in found if m]


def unittest_verdicts(log: str) -> list[tuple[str, str]]:
    """Failing verdicts of a unittest/Django ``-v`` log swebench's parser misses: the failure
    report's ``FAIL: <test>`` headers (whole name) and a bare ``FAIL``/``ERROR`` line that ends
    a test whose output came between its ``... `` and its verdict."""
    verdicts: list[tuple[str, str]] = []
    previous: str | None = None
    for raw in log.split("\n"):
        line = raw.strip()
        header = _UNITTEST_HEADER.match(line)
        if header:
            verdicts.append((header.group(2), "FAILED" if header.group(1) == "FAIL" else "ERROR"))
            continue
        if _UNITTEST_DOTS in line:
            previous = line.split(_UNITTEST_DOTS)[0]
        elif line in ("FAIL", "ERROR") and previous is not None:
            verdicts.append((previous, "FAILED" if line == "FAIL" else "ERROR"))
    return verdicts


def is_junk_id(case: str) -> bool:
    """True for a published id that names no test: it starts with ``[`` (``[``, ``[100%]``,
    ``[100%]-----``, pieces of pytest's progress output in pytest-dev__pytest-5227's list)."""
    return case.lstrip().startswith("[")
