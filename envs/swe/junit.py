"""pytest's JUnit XML report as a second, structured source of test results.

The harness runs pytest-based test commands with ``--junitxml=<fresh path>``: pytest writes that
file at the end of its session (``pytest_sessionfinish``), so a run that never finished (the code
under test called ``os._exit``, or crashed the interpreter) leaves none, whatever it printed. A
test counts as passed only when the log and the JUnit report both say so
(:func:`gymfleet.envs.swe.grading.grade_output`).

Ids: pytest writes each test as ``classname`` + ``name`` from its node id
(``_pytest.junitxml.mangle_test_address``: the file path dotted without ``.py``, the classes,
then the function name with its parameters), which :func:`junit_key` reproduces.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

JunitReports = dict[tuple[str, str], list[str]]
"""(classname, name) -> every status the report gave that test (usually one)."""
MAX_JUNIT_BYTES = 64 * 1024 * 1024
"""Largest report read (a bigger file is treated as unreadable)."""


def runs_pytest(test_cmd: str) -> bool:
    """True when the test command is pytest itself (``pytest ...``, ``python -m pytest ...``),
    so that ``--junitxml`` can be appended; tox, Django's runtests and sympy's bin/test are not."""
    words = test_cmd.split()
    return words[:1] in (["pytest"], ["py.test"]) or (
        len(words) >= 3 and words[0].startswith("python") and words[1:3] == ["-m", "pytest"])


def junit_key(node_id: str) -> tuple[str, str]:
    """The (classname, name) pytest's JUnit report gives the test ``node_id``
    (``a/b/test_x.py::C::test_m[p]`` -> ``("a.b.test_x.C", "test_m[p]")``)."""
    path, bracket, params = node_id.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def parse_junit(xml: bytes) -> JunitReports | None:
    """Every ``<testcase>``'s status: ERROR (an ``<error>`` child), FAILED (``<failure>``),
    SKIPPED (``<skipped>``, xfail included), else PASSED. None when the file is not JUnit XML
    or is larger than :data:`MAX_JUNIT_BYTES`."""
    if len(xml) > MAX_JUNIT_BYTES or b"<!ENTITY" in xml:  # no entity expansion bombs
        return None
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return None
    reports: JunitReports = {}
    for case in root.iter("testcase"):
        tags = {child.tag for child in case}
        status = ("ERROR" if "error" in tags else "FAILED" if "failure" in tags
                  else "SKIPPED" if "skipped" in tags else "PASSED")
        reports.setdefault((case.get("classname", ""), case.get("name", "")), []).append(status)
    return reports


_OPTION = re.compile(r"(.*?)\[(.*)\]")


def option_id(name: str) -> str:
    """A test name as swebench's ``parse_log_pytest_options`` (pylint's and others' parser)
    keys it: a parameter that is an absolute path keeps its last component
    (``test_stdin[/testbed/tests/mymodule.py-mymodule-/testbed/tests/mymodule.py]`` ->
    ``test_stdin[/mymodule.py]``: the id SWE-bench publishes), else unchanged."""
    match = _OPTION.search(name)
    if not match:
        return name
    main, option = match.groups()
    if option.startswith("/") and not option.startswith("//") and "*" not in option:
        option = "/" + option.split("/")[-1]
    return f"{main}[{option}]"


def reports_for(case: str, reports: JunitReports) -> list[str] | None:
    """The statuses of the expected id ``case``: the test of that name, else the tests whose name
    swebench's option rule maps to it (:func:`option_id`); an id cut mid-parameter (more ``[``
    than ``]``) gathers every test of its class whose name it prefixes. None when the report
    lacks it."""
    classname, name = junit_key(case)
    if (classname, name) in reports:
        return reports[(classname, name)]
    renamed = [s for (cls, n), statuses in reports.items()
               if cls == classname and option_id(n) == name for s in statuses]
    if renamed:
        return renamed
    if case.count("[") > case.count("]"):
        found = [s for (cls, n), statuses in reports.items()
                 if cls == classname and n.startswith(name) for s in statuses]
        return found or None
    return None
