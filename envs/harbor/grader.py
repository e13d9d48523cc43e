"""Grading a Harbor task as Harbor does: tests copied in after the agent, a reward file read back.

Harbor layout: stale reward files are deleted, ``tests/`` goes to ``/tests`` (never present
before), ``bash /tests/test.sh`` runs under ``[verifier] timeout_sec`` in the task's working
directory, and the reward is ``/logs/verifier/reward.txt`` (one float) or
``/logs/verifier/reward.json`` (an object of finite numbers: its ``reward`` key is the reward,
the others go to ``info``). Terminal-Bench 1 layout: ``tests/`` and ``run-tests.sh`` go to
``/tests``, ``bash /tests/run-tests.sh`` runs with ``TEST_DIR=/tests``, and its pytest ``-rA``
summary is parsed as TB1's ``PytestParser`` does (PASSED, XFAIL and SKIPPED pass; an empty
summary is a grading error here, where TB1 counted it as resolved).

A missing, empty, non-numeric or non-finite reward, or a verifier past its timeout, is a
*grading error*: reward 0 with ``error`` set. It happens inside the sandbox the policy worked in
(it may have deleted ``/logs`` or broken Python), so under the sandbox contract
(``docs/sandbox.md``) it is the policy's outcome and trains; the sweep counts it apart from a
plain 0 so that broken tasks show. An infrastructure failure raises ``SandboxError``.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from gymfleet.envs.errors import SandboxFileError
from gymfleet.envs.harbor.dockerfile import VERIFIER_OFFLINE_ENV
from gymfleet.envs.harbor.task import HarborTask
from gymfleet.envs.sandbox.base import Sandbox
from gymfleet.envs.sandbox.bulk import folder_files, put_files

TESTS_DIR = "/tests"
LOGS_DIR = "/logs/verifier"
_SUMMARY = re.compile(r"=+ short test summary info =+")
_STATUS = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+)", re.M)
_PASSING = {"PASSED", "XFAIL", "SKIPPED"}


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
    """

    reward: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    exit_code: int | None = None
    timed_out: bool = False
    output_tail: str = ""
    duration_s: float = 0.0

    def as_info(self) -> dict[str, Any]:
        """The report as plain data for ``info["grading"]``."""
        return {"reward": self.reward, "extra": self.extra, "error": self.error, "exit_code": self.exit_code,
                "timed_out": self.timed_out, "output_tail": self.output_tail, "duration_s": round(self.duration_s, 3)}


async def run_verifier(sandbox: Sandbox, task: HarborTask, workdir: str) -> VerifierReport:
    """Copies the task's tests into ``sandbox``, runs them, and reads the reward.

    Args:
        sandbox: the sandbox the agent worked in, after the agent finished.
        task: the task whose tests to run.
        workdir: the directory the verifier starts in (the image's WORKDIR).

    Raises:
        SandboxError: the sandbox failed (infrastructure); never for a bad reward.
    """
    started = time.monotonic()
    await sandbox.exec(f"rm -rf {TESTS_DIR} {LOGS_DIR}; mkdir -p {TESTS_DIR} {LOGS_DIR}", timeout_s=60)
    files = {f"{TESTS_DIR}/{name}": content for name, content in folder_files(task.tests_dir).items()}
    if task.layout == "tb1":
        files[f"{TESTS_DIR}/run-tests.sh"] = (task.test_script.read_bytes(), 0o755)
    await put_files(sandbox, files)
    script = f"{TESTS_DIR}/{'test.sh' if task.layout == 'harbor' else 'run-tests.sh'}"
    env = {**VERIFIER_OFFLINE_ENV, **task.verifier_env}
    run = await sandbox.exec(f"bash {script}", timeout_s=task.verifier_timeout_s, workdir=workdir, env=env)
    report = VerifierReport(exit_code=run.exit_code, timed_out=run.timed_out,
                            output_tail=(run.stdout + run.stderr)[-4000:])
    if run.timed_out:
        report.error = f"verifier timed out after {task.verifier_timeout_s:g} s"
    elif task.layout == "harbor":
        await _read_reward(sandbox, report)
    else:
        _parse_pytest(run.stdout + run.stderr, report)
    report.duration_s = time.monotonic() - started
    return report


async def _read_reward(sandbox: Sandbox, report: VerifierReport) -> None:
    json_text = await _fetch(sandbox, f"{LOGS_DIR}/reward.json")
    if json_text is not None:
        reward, report.extra, report.error = parse_reward_json(json_text)
        report.reward = reward if report.error is None else 0.0
        return
    text = await _fetch(sandbox, f"{LOGS_DIR}/reward.txt")
    if text is None:
        report.error = f"the verifier wrote neither {LOGS_DIR}/reward.txt nor reward.json"
        return
    reward, report.error = parse_reward_text(text)
    report.reward = reward if report.error is None else 0.0


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
    bad = [k for k, v in value.items() if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)]
    if bad:
        return 0.0, {}, f"reward.json has non-numeric or non-finite values: {', '.join(bad[:5])}"
    if "reward" not in value:
        return 0.0, value, f"reward.json has no 'reward' key (keys: {', '.join(list(value)[:10])})"
    extra = {k: v for k, v in value.items() if k != "reward"}
    return float(value["reward"]), extra, None


def _parse_pytest(output: str, report: VerifierReport) -> None:
    parts = _SUMMARY.split(output, maxsplit=1)
    if len(parts) < 2:
        report.error = "no pytest 'short test summary info' in the verifier's output (run with -rA)"
        return
    statuses = {name.split("::")[-1]: status for status, name in _STATUS.findall(parts[1])}
    if not statuses:
        report.error = "the pytest summary lists no test"
        return
    report.extra = {"tests": statuses}
    report.reward = float(all(s in _PASSING for s in statuses.values()))


async def _fetch(sandbox: Sandbox, path: str) -> bytes | None:
    try:
        return await sandbox.get_file(path)
    except SandboxFileError:
        return None
