"""Grading a terminal task: hidden tests copied in after the agent, a result file read back.

Before the tests, every process the agent left is killed (``Sandbox.stop_processes``: checked
by the backend, not by the sandbox's own tools) and the tests run where nothing the agent wrote
reaches their tools (``Sandbox.verifier``: this sandbox when its system files are untouched,
else a fresh one from the task's image holding a copy of the workdir). The tests go to a fresh
folder with a random name and run in a clean bash (the agent's shell state is not sourced).
``tests/run.sh`` must write ``$GYMFLEET_RESULT_FILE`` (a random name inside that folder)
echoing the nonce of ``$GYMFLEET_NONCE_FILE`` (read and removed by the tests before any of the
agent's programs run), so a result file prepared beforehand is never read. After the tests,
whatever they started is killed before the file is read. The terminal's text is never parsed.
Reward is 1 only when the file lists at least one test and every test passed; a skipped test is
not a passed test. What processes the agent left running is handed to the tests as a file
(``$GYMFLEET_PROCESSES_FILE``), listed by the backend before it killed them.

The room the tests go to is the grader's: when the copy fails (the agent replaced the scratch
folder with a file or a link, or took its write permission away), the grader, with the agent's
processes gone, removes what is in the way, gives the folders back their owner's write bit and
copies again. A sandbox whose space is still too full (or too locked) for the tests is the
policy's doing (``SandboxDamagedError``: graded 0), never an infrastructure failure that would be
retried and would quarantine the task.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ValidationError

from gymfleet.envs.errors import SandboxDamagedError, SandboxFileError
from gymfleet.envs.sandbox.base import Sandbox
from gymfleet.envs.sandbox.bulk import put_files
from gymfleet.envs.task_files import folder_files
from gymfleet.envs.terminal.task import Task

TESTLIB_NAME = "gymfleet_testlib.py"
TESTLIB_SOURCE = Path(__file__).resolve().parent / "testlib.py"
TESTLIB_SH_NAME = "gymfleet_testlib.sh"
TESTLIB_SH_SOURCE = Path(__file__).resolve().parent / "testlib.sh"
"""The bash helper, for checks that only read files (no interpreter to start: the easy tier's)."""
NONCE_NAME = "nonce"
"""The file holding this grading run's nonce; the tests read and remove it first."""
PROCESSES_NAME = "processes.json"
"""The JSON list of the command lines of the processes the agent left running."""


class TestStatus(str, Enum):
    """The status of one hidden test."""

    passed = "passed"
    failed = "failed"
    skipped = "skipped"
    error = "error"


class TestResult(BaseModel):
    """One test's line in the result file."""

    name: str
    status: TestStatus
    message: str = ""


class ResultFile(BaseModel):
    """The JSON ``tests/run.sh`` writes to ``$GYMFLEET_RESULT_FILE``."""

    nonce: str
    """Must equal the nonce in ``$GYMFLEET_NONCE_FILE`` of this grading run."""
    tests: list[TestResult]
    """Every test that ran, with its status."""


@dataclass
class GradeReport:
    """What grading found.

    Attributes:
        reward: 1.0 when every test passed (and at least one ran), else 0.0.
        tests: per-test results, empty on a grading error.
        error: why grading itself failed (no/malformed result file, timeout), else None.
        exit_code: ``tests/run.sh``'s exit status (informative only; the result file decides).
        output_tail: the end of the tests' stdout and stderr, for people.
        duration_s: seconds spent grading.
        folder: where the tests ran in the sandbox.
    """

    reward: float = 0.0
    tests: list[TestResult] = field(default_factory=list)
    error: str | None = None
    exit_code: int | None = None
    output_tail: str = ""
    duration_s: float = 0.0
    folder: str = ""

    def as_info(self) -> dict[str, object]:
        """The report as plain data for ``info``."""
        return {
            "reward": self.reward,
            "tests": {t.name: t.status.value for t in self.tests},
            "failures": {t.name: t.message for t in self.tests if t.status is not TestStatus.passed},
            "error": self.error,
            "exit_code": self.exit_code,
            "output_tail": self.output_tail,
            "duration_s": round(self.duration_s, 3),
        }


def score(result: ResultFile) -> float:
    """1.0 when at least one test ran and every test passed; skipped counts as not passed."""
    return float(bool(result.tests) and all(t.status is TestStatus.passed for t in result.tests))


async def grade(sandbox: Sandbox, task: Task, scratch_dir: str) -> GradeReport:
    """Stops the agent's processes, then runs ``task``'s hidden tests where the agent cannot
    reach them, and reads their result file.

    Args:
        sandbox: the sandbox the agent worked in, after the agent finished.
        task: the task whose ``tests/`` to run.
        scratch_dir: the env's folder in the sandbox; the tests go to a fresh random folder in it.

    Raises:
        SandboxDamagedError: a process outlived the kill (the policy's doing: reward 0).
        SandboxError: the sandbox failed (infrastructure). Test failures and bad result files
            are not raised: they give reward 0 and ``error`` says why.
    """
    start = time.monotonic()
    processes = await sandbox.stop_processes()
    verifier = await sandbox.verifier()
    try:
        report = await _run_tests(verifier, task, scratch_dir, processes)
    finally:
        if verifier is not sandbox:
            await verifier.close()
    report.duration_s = time.monotonic() - start
    return report


async def _run_tests(sandbox: Sandbox, task: Task, scratch_dir: str, processes: list[str]) -> GradeReport:
    folder = f"{scratch_dir}/tests-{uuid.uuid4().hex}"
    nonce = uuid.uuid4().hex
    result_name = f"result-{uuid.uuid4().hex}.json"
    await _copy_tests(sandbox, task, folder, nonce, processes)
    # absolute paths for the tests, whatever folder they change to (a subshell only when relative)
    test_dir = shlex.quote(folder) if folder.startswith("/") else f'"$(cd {folder} && pwd)"'
    command = (
        f'export GYMFLEET_TEST_DIR={test_dir} && '
        f'export GYMFLEET_RESULT_FILE="$GYMFLEET_TEST_DIR/{result_name}" && '
        f'export GYMFLEET_NONCE_FILE="$GYMFLEET_TEST_DIR/{NONCE_NAME}" && '
        f'export GYMFLEET_PROCESSES_FILE="$GYMFLEET_TEST_DIR/{PROCESSES_NAME}" && '
        'exec bash "$GYMFLEET_TEST_DIR/run.sh"'  # exec: no bash left waiting for it
    )
    run = await sandbox.exec(command, timeout_s=task.config.test_timeout_s)
    await sandbox.stop_processes()  # what the tests started (the agent's programs among them)
    report = GradeReport(exit_code=run.exit_code, output_tail=(run.stdout + run.stderr)[-4000:], folder=folder)
    if run.timed_out:
        report.error = f"tests timed out after {task.config.test_timeout_s:g} s"
    else:
        _read_result(report, await _fetch(sandbox, f"{folder}/{result_name}"), nonce)
    return report


async def _copy_tests(sandbox: Sandbox, task: Task, folder: str, nonce: str, processes: list[str]) -> None:
    files = {f"{folder}/{name}": content for name, content in folder_files(task.tests_dir, task.path).items()}
    files[f"{folder}/{TESTLIB_NAME}"] = (TESTLIB_SOURCE.read_bytes(), 0o644)
    files[f"{folder}/{TESTLIB_SH_NAME}"] = (TESTLIB_SH_SOURCE.read_bytes(), 0o644)
    files[f"{folder}/{NONCE_NAME}"] = (nonce.encode(), 0o600)
    files[f"{folder}/{PROCESSES_NAME}"] = (json.dumps(processes).encode(), 0o644)
    try:
        await put_files(sandbox, files)
        return
    except SandboxFileError:  # the room was taken: claim it back (nothing of the agent's runs now)
        await sandbox.exec(_claim_room_command(folder), timeout_s=30)
    try:
        await put_files(sandbox, files)
    except SandboxFileError as exc:  # the sandbox runs commands, so its own state refuses the copy
        raise SandboxDamagedError(
            f"no room for the grader's tests in {folder}: the sandbox's space is full or locked by "
            f"its own commands ({exc})") from exc


def _claim_room_command(folder: str) -> str:
    """Bash that makes every parent of ``folder`` a writable folder of the grader's user again:
    a file or link in the way is removed, a folder made read-only gets its owner's write bit."""
    parents, parent = [], folder.rsplit("/", 1)[0]
    while parent and parent not in ("/", "."):
        parents.append(parent)
        parent = parent.rsplit("/", 1)[0] if "/" in parent else ""
    steps = [f'{{ [ -d {p} ] && [ ! -L {p} ]; }} || rm -rf -- {p}; chmod u+rwx -- {p} 2>/dev/null'
             for p in map(shlex.quote, reversed(parents))]
    return "; ".join(steps) + f"; mkdir -p -- {shlex.quote(folder)} 2>/dev/null; true"


async def _fetch(sandbox: Sandbox, path: str) -> bytes | None:
    try:
        return await sandbox.get_file(path)
    except SandboxFileError:
        return None


def _read_result(report: GradeReport, data: bytes | None, nonce: str) -> None:
    if data is None:
        report.error = "tests/run.sh wrote no result file ($GYMFLEET_RESULT_FILE)"
        return
    try:
        result = ResultFile.model_validate(json.loads(data))
    except (ValueError, ValidationError) as exc:
        report.error = f"malformed result file: {str(exc)[:500]}"
        return
    if result.nonce != nonce:
        report.error = "result file does not carry this grading run's nonce"
        return
    if not result.tests:
        report.error = "result file lists no tests"
        return
    report.tests = result.tests
    report.reward = score(result)
