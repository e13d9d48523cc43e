"""The helper hidden tests import inside the sandbox (copied there as ``gymfleet_testlib.py``).

It runs the ``unittest`` cases of the calling script and writes the result file the grader
reads (see ``envs/terminal/README.md``). It runs on the sandbox's own ``python3``, so it uses
only the standard library and stays compatible with Python 3.8.

Usage in a task's ``tests/checks.py``::

    import os, sys, unittest
    sys.path.insert(0, os.environ["GYMFLEET_TEST_DIR"])
    import gymfleet_testlib

    class Checks(unittest.TestCase):
        def test_output(self): ...

    if __name__ == "__main__":
        gymfleet_testlib.main()
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import unittest
from typing import Any

ExcInfo = Any  # (type, value, traceback) as unittest passes it


def _take_nonce() -> str:
    """Reads and removes the grading run's nonce, before any of the agent's programs can run: a
    program the tests start (run as the same user) finds neither the file nor an environment
    variable to forge a result with."""
    path = os.environ.pop("GYMFLEET_NONCE_FILE", "")
    try:
        with open(path) as fh:
            nonce = fh.read().strip()
        os.unlink(path)
    except OSError:
        return ""
    return nonce


def _guard_memory() -> None:
    """Makes this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``): a program the tests
    start, run as the same user, can then neither read its memory nor its environment through
    ``/proc`` (that needs ``CAP_SYS_PTRACE``, which no sandbox grants)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):  # not Linux: nothing to guard this way
        pass


_guard_memory()
_NONCE = _take_nonce()


def processes() -> list:
    """Command lines of the processes the agent left running when it finished (listed by the
    sandbox's backend before it killed them all: none of them runs beside the tests)."""
    with open(os.environ["GYMFLEET_PROCESSES_FILE"]) as fh:
        return json.load(fh)


def _format(err: ExcInfo) -> str:
    return "".join(traceback.format_exception(err[0], err[1], err[2]))


class _Recorder(unittest.TextTestResult):
    """Keeps one record (name, status, message) per test; unittest's own result drops passes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.records: list[dict[str, str]] = []

    def _record(self, test: Any, status: str, message: str = "") -> None:
        name = test.id().split(".", 1)[-1]
        self.records.append({"name": name, "status": status, "message": message[-2000:]})

    def addSuccess(self, test: Any) -> None:  # noqa: N802 - unittest's names
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test: Any, err: ExcInfo) -> None:  # noqa: N802
        super().addFailure(test, err)
        self._record(test, "failed", _format(err))

    def addError(self, test: Any, err: ExcInfo) -> None:  # noqa: N802
        super().addError(test, err)
        self._record(test, "error", _format(err))

    def addSubTest(self, test: Any, subtest: Any, err: ExcInfo) -> None:  # noqa: N802
        super().addSubTest(test, subtest, err)
        if err is not None:  # a failed subtest fails its test; unittest then never calls addSuccess
            status = "failed" if issubclass(err[0], test.failureException) else "error"
            self._record(subtest, status, _format(err))

    def addSkip(self, test: Any, reason: str) -> None:  # noqa: N802
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addExpectedFailure(self, test: Any, err: ExcInfo) -> None:  # noqa: N802
        super().addExpectedFailure(test, err)
        self._record(test, "failed", "expected failure: a gymfleet check must pass outright")

    def addUnexpectedSuccess(self, test: Any) -> None:  # noqa: N802
        super().addUnexpectedSuccess(test)
        self._record(test, "failed", "unexpected success")


def write_results(records: list[dict[str, str]]) -> None:
    """Writes ``records`` (dicts with name, status, message) where the grader expects them."""
    payload = {"nonce": _NONCE, "tests": records}
    with open(os.environ["GYMFLEET_RESULT_FILE"], "w") as fh:
        json.dump(payload, fh)


def main() -> None:
    """Runs every TestCase in ``__main__``, writes the result file, exits 0 iff all passed."""
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules["__main__"])
    runner = unittest.TextTestRunner(resultclass=_Recorder, verbosity=2, stream=sys.stdout)
    result = runner.run(suite)
    assert isinstance(result, _Recorder)
    write_results(result.records)
    sys.exit(0 if result.wasSuccessful() and not result.skipped else 1)
