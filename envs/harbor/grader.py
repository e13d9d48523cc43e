"""Grading a Harbor task as Harbor does: tests copied in after the agent, a reward file read back.

Harbor layout: stale reward files are deleted, ``tests/`` goes to ``/tests`` (never present
before), ``bash /tests/test.sh`` runs under ``[verifier] timeout_sec`` in the task's working
directory, and the reward is ``/logs/verifier/reward.txt`` (one float) or
``/logs/verifier/reward.json`` (an object of finite numbers: its ``reward`` key is the reward,
the others go to ``info``). Terminal-Bench 1 layout: ``tests/`` and ``run-tests.sh`` go to
``/tests``, ``bash /tests/run-tests.sh`` runs with ``TEST_DIR=/tests``, and its pytest ``-rA``
summary on stdout is parsed as TB1's ``PytestParser`` does (PASSED, XFAIL and SKIPPED pass), with
differences that keep a program under test from forging it (TB1 reads stdout and stderr, lets
the last status of a test win, and ignores the exit code): stdout only, the worst status of a
test wins, and the reward is 1 only when ``run-tests.sh`` also exited 0 and pytest's final line
counts no failure; an empty summary is a grading error here, where TB1 counted it as resolved.

Where the agent cannot reach it (``docs/sandbox.md``): every process the agent left is killed
first (``Sandbox.stop_processes``, checked by the backend; a task listed in the env's
``keep_processes`` keeps them, for tests that probe a service, trading that isolation away), and
the verifier runs where none of the agent's changes reaches its tools
(``Sandbox.verifier(carry_changes=True)``: the agent's container when it left the interpreters,
shells, loader, start-up hooks and their configuration as the image has them, else a fresh
container of the task's image holding every other change). Whatever the tests (or kept
processes) started is killed before the reward file is read, so nothing writes it afterwards.

Harbor layout: ``reward.txt`` wins over ``reward.json`` (whose numeric keys, ``reward`` aside, then
go to ``extra``); a reward outside [0, 1] is kept and flagged (``reward_out_of_range``).
A missing, empty, non-numeric or non-finite reward, a ``reward.json`` alone without a ``reward``
key, or a verifier past its timeout, is a *grading error*: reward 0 with ``error`` set. It is the policy's outcome under the sandbox
contract (it may have deleted its work or broken what the tests need), and trains; the sweep
counts it apart from a plain 0 so that broken tasks show. An infrastructure failure raises
``SandboxError``; a process that outlives the kill raises ``SandboxDamagedError`` (the policy's
damage: reward 0).
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from gymfleet.envs.errors import SandboxFileError
from gymfleet.envs.harbor.dockerfile import entrypoint_command
from gymfleet.envs.harbor.staging import VERIFIER_APT_DIR, VERIFIER_APT_FILES, VERIFIER_OFFLINE_ENV, offline_script
from gymfleet.envs.harbor.task import HarborTask
from gymfleet.envs.sandbox.base import Sandbox
from gymfleet.envs.sandbox.bulk import put_files
from gymfleet.envs.task_files import folder_files, read_bytes

TESTS_DIR = "/tests"
LOGS_DIR = "/logs/verifier"
_SUMMARY = re.compile(r"=+ short test summary info =+")
_STATUS = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+)", re.M)
_PASSING = {"PASSED", "XFAIL", "SKIPPED"}
_FINAL = re.compile(r"^=+ (.* in [\d.]+s.*?) =+$", re.M)
"""pytest's last line: ``==== 1 failed, 2 passed in 0.05s ====``."""
_FAILURES = re.compile(r"\b\d+ (failed|errors?)\b")


@dataclass
class VerifierReport:
    """What grading found.

    Attributes:
        reward: the reward read (0.0 on a grading error).
        extra: reward.json's other keys, or TB1's per-test statuses.
        error: why no reward could be read, else None.
        exit_code: the verifier's exit status.
        timed_out: True when it ran past its timeout.
        output_tail: the end of its stdout and stderr.
        duration_s: seconds spent grading.
        stopped_processes: command lines of the agent's processes killed before the verifier
            (as the backend saw them; at most 50).
        kept_processes: True when the task kept the agent's processes for its tests.
        fresh_sandbox: True when the verifier ran in a fresh sandbox, not the agent's.
        withheld: changed paths of the agent kept from that fresh sandbox, and why (at most 50).
        reward_out_of_range: the reward read is outside [0, 1]; it is kept as read (Harbor
            allows any float, and GRPO's group-normalised advantage works with any), flagged so
            that a task scoring on another scale shows.
    """

    reward: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    exit_code: int | None = None
    timed_out: bool = False
    output_tail: str = ""
    duration_s: float = 0.0
    stopped_processes: list[str] = field(default_factory=list)
    kept_processes: bool = False
    fresh_sandbox: bool = False
    withheld: dict[str, str] = field(default_factory=dict)
    reward_out_of_range: bool = False

    def as_info(self) -> dict[str, Any]:
        """The report as plain data for ``info["grading"]``."""
        return {"reward": self.reward, "extra": self.extra, "error": self.error, "exit_code": self.exit_code,
                "timed_out": self.timed_out, "output_tail": self.output_tail, "duration_s": round(self.duration_s, 3),
                "stopped_processes": self.stopped_processes, "kept_processes": self.kept_processes,
                "fresh_sandbox": self.fresh_sandbox, "withheld": self.withheld,
                "reward_out_of_range": self.reward_out_of_range}


async def run_verifier(sandbox: Sandbox, task: HarborTask, workdir: str, keep_processes: bool = False,
                       entrypoint: list[str] | None = None) -> VerifierReport:
    """Stops the agent's processes, then copies the task's tests where the agent's changes cannot
    reach the verifier's tools, runs them, stops what they started, and reads the reward.

    Args:
        sandbox: the sandbox the agent worked in, after the agent finished.
        task: the task whose tests to run.
        workdir: the directory the verifier starts in (the image's WORKDIR).
        keep_processes: leave the agent's processes running for the tests (they are killed
            after the tests, before the reward is read; and before them, when the verifier
            needs a fresh sandbox).
        entrypoint: the image's own entrypoint, started again (from the verifier sandbox's
            files) before the tests, so that the services it runs are up for them as in
            Harbor; not when the agent's kept processes (its earlier run among them) are there.

    Raises:
        SandboxDamagedError: a process outlived the kill (the policy's doing: reward 0).
        SandboxError: the sandbox failed (infrastructure); never for a bad reward.
    """
    started = time.monotonic()
    stopped = [] if keep_processes else await sandbox.stop_processes()
    verifier = await sandbox.verifier(carry_changes=True)
    try:
        if entrypoint and not (keep_processes and verifier is sandbox):
            await verifier.exec(entrypoint_command(entrypoint), timeout_s=60)
        report = await _verify(verifier, task, workdir)
    finally:
        if verifier is not sandbox:
            await verifier.close()
    report.stopped_processes, report.kept_processes = stopped[:50], keep_processes
    report.fresh_sandbox = verifier is not sandbox
    report.withheld = dict(list(getattr(verifier, "withheld", {}).items())[:50])
    report.duration_s = time.monotonic() - started
    return report


async def _verify(sandbox: Sandbox, task: HarborTask, workdir: str) -> VerifierReport:
    await sandbox.exec(f"rm -rf {TESTS_DIR} {LOGS_DIR} {VERIFIER_APT_DIR}; mkdir -p {TESTS_DIR} {LOGS_DIR}", timeout_s=60)
    files: dict[str, Any] = {f"{TESTS_DIR}/{name}": content for name, content in folder_files(task.tests_dir, task.path).items()}
    files |= {path: (data, 0o644) for path, data in VERIFIER_APT_FILES.items()}
    if task.layout == "tb1":
        files[f"{TESTS_DIR}/run-tests.sh"] = (read_bytes(task.path, task.test_script), 0o755)
    script_path = f"{TESTS_DIR}/{task.test_script.name}"
    if script_path in files:  # uv's throw-away cache flags dropped: the staged cache is all there is offline
        data, mode = files[script_path]
        files[script_path] = (offline_script(data.decode(errors="surrogateescape")).encode(errors="surrogateescape"), mode)
    await put_files(sandbox, files)
    script = f"{TESTS_DIR}/{'test.sh' if task.layout == 'harbor' else 'run-tests.sh'}"
    env = {**VERIFIER_OFFLINE_ENV, **task.verifier_env}
    run = await sandbox.exec(f"bash {script}", timeout_s=task.verifier_timeout_s, workdir=workdir, env=env)
    await sandbox.stop_processes()  # what the tests (or kept agent processes) started: none writes the reward now
    report = VerifierReport(exit_code=run.exit_code, timed_out=run.timed_out,
                            output_tail=(run.stdout + run.stderr)[-4000:])
    if run.timed_out:
        report.error = f"verifier timed out after {task.verifier_timeout_s:g} s"
    elif task.layout == "harbor":
        await _read_reward(sandbox, report)
    else:
        _parse_pytest(run.stdout, report)
    return report


async def _read_reward(sandbox: Sandbox, report: VerifierReport) -> None:
    """As Harbor reads them: ``reward.txt`` first; ``reward.json`` only without it (then its
    ``reward`` key is the reward), else its numeric keys other than ``reward`` go to ``extra``."""
    text = await _fetch(sandbox, f"{LOGS_DIR}/reward.txt")
    json_text = await _fetch(sandbox, f"{LOGS_DIR}/reward.json")
    if text is not None:
        reward, report.error = parse_reward_text(text)
        if json_text is not None:
            report.extra = json_extra(json_text)
    elif json_text is not None:
        reward, report.extra, report.error = parse_reward_json(json_text)
    else:
        report.error = f"the verifier wrote neither {LOGS_DIR}/reward.txt nor reward.json"
        return
    report.reward = reward if report.error is None else 0.0
    report.reward_out_of_range = report.error is None and not 0.0 <= reward <= 1.0


def json_extra(data: bytes) -> dict[str, Any]:
    """The finite numbers of a ``reward.json`` beside a ``reward.txt``, its ``reward`` key aside
    (the reward is reward.txt's); nothing when it is not a JSON object."""
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if k != "reward" and _finite_number(v)}


def _finite_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def parse_reward_text(data: bytes) -> tuple[float, str | None]:
    """``reward.txt``: one finite float. Returns (reward, error or None)."""
    text = data.decode(errors="replace").strip()
    try:
        value = float(text)
    except ValueError:
        return 0.0, f"reward.txt is not a number: {text[:80]!r}"
    return (value, None) if math.isfinite(value) else (0.0, f"reward.txt is not finite: {text[:80]!r}")


def parse_reward_json(data: bytes) -> tuple[float, dict[str, Any], str | None]:
    """``reward.json``: an object of finite numbers with a ``reward`` key.
    Returns (reward, the other keys, error or None)."""
    try:
        value = json.loads(data)
    except ValueError as exc:
        return 0.0, {}, f"reward.json is not JSON: {exc}"
    if not isinstance(value, dict):
        return 0.0, {}, "reward.json is not an object"
    bad = [k for k, v in value.items() if not _finite_number(v)]
    if bad:
        return 0.0, {}, f"reward.json has non-numeric or non-finite values: {', '.join(bad[:5])}"
    if "reward" not in value:
        return 0.0, value, f"reward.json has no 'reward' key (keys: {', '.join(list(value)[:10])})"
    extra = {k: v for k, v in value.items() if k != "reward"}
    return float(value["reward"]), extra, None


def _parse_pytest(stdout: str, report: VerifierReport) -> None:
    """TB1's ``-rA`` summary, from ``stdout`` alone (the agent's program can write to the verifier's
    stderr through ``/proc/<ppid>/fd/2``): a test listed with a failing status anywhere in it
    failed, whatever else claims it passed; 1 only when every listed test passed, pytest's final
    line counts no failure or error, and ``run-tests.sh`` exited 0."""
    parts = _SUMMARY.split(stdout, maxsplit=1)
    if len(parts) < 2:
        report.error = "no pytest 'short test summary info' in the verifier's output (run with -rA)"
        return
    statuses: dict[str, str] = {}
    for status, name in _STATUS.findall(parts[1]):
        test = name.split("::")[-1]
        if statuses.get(test, "PASSED") in _PASSING:  # the worst status seen wins, not the last
            statuses[test] = status
    if not statuses:
        report.error = "the pytest summary lists no test"
        return
    final = _FINAL.findall(parts[1])
    report.extra = {"tests": statuses}
    report.reward = float(all(s in _PASSING for s in statuses.values()) and report.exit_code == 0
                          and not (final and _FAILURES.search(final[-1])))


async def _fetch(sandbox: Sandbox, path: str) -> bytes | None:
    try:
        return await sandbox.get_file(path)
    except SandboxFileError:
        return None
