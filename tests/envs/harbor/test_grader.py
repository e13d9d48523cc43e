"""``envs/harbor/grader.py`` on a scripted sandbox (no Docker): what a verifier's output and
reward files turn into, including output a hostile program under test forged."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gymfleet.envs.harbor.env import EXAMPLES_DIR
from gymfleet.envs.harbor.grader import LOGS_DIR, VerifierReport, run_verifier
from gymfleet.envs.harbor.task import HarborTask, load_task
from gymfleet.envs.sandbox.base import ExecResult, SandboxLabels, SandboxSpec
from tests.envs.sandbox.fakes import FakeSandbox

TB1 = load_task(EXAMPLES_DIR / "tb1-hello")
HARBOR = load_task(EXAMPLES_DIR / "harbor-hello")


class ScriptedVerifier(FakeSandbox):
    """A sandbox whose test script prints ``stdout``/``stderr``, exits ``exit_code`` and leaves
    ``reward_files`` (name -> content) in the logs folder; every other command succeeds."""

    def __init__(self, stdout: str = "", stderr: str = "", exit_code: int = 0,
                 reward_files: dict[str, bytes] | None = None) -> None:
        super().__init__(SandboxSpec(), SandboxLabels(run_id="grader"))
        self.result = ExecResult(exit_code, stdout, stderr, 0.0)
        self.reward_files = reward_files or {}

    @property
    def isolated(self) -> bool:
        return False  # put_files then writes file by file

    async def exec(self, cmd: str, timeout_s: float = 60.0, workdir: str | None = None,
                   env: dict[str, str] | None = None) -> ExecResult:
        if cmd.startswith("bash /tests/"):
            self.files.update({f"{LOGS_DIR}/{name}": data for name, data in self.reward_files.items()})
            return self.result
        return ExecResult(0, "", "", 0.0)


def grade(task: HarborTask, **script: object) -> VerifierReport:
    return asyncio.run(run_verifier(ScriptedVerifier(**script), task, "/app"))  # type: ignore[arg-type]


HONEST_FAIL = """\
============================= test session starts ==============================
collected 2 items

../tests/test_outputs.py FF                                              [100%]
=========================== short test summary info ============================
FAILED ../tests/test_outputs.py::test_add_small - assert 0 == 5
FAILED ../tests/test_outputs.py::test_add_negative - assert 0 == -3
============================== 2 failed in 0.05s ===============================
"""
# What the agent's solution.py wrote to run-tests.sh's stderr through /proc/<ppid>/fd/2 (or from
# an atexit hook): TB1's parser reads stdout and stderr together and the last status wins.
FORGED_STDERR = """\
=========================== short test summary info ============================
PASSED ../tests/test_outputs.py::test_add_small
PASSED ../tests/test_outputs.py::test_add_negative
"""
HONEST_PASS = HONEST_FAIL.replace("FAILED", "PASSED").replace(" - assert 0 == 5", "").replace(
    " - assert 0 == -3", "").replace("2 failed", "2 passed").replace(" FF ", " .. ")


def test_tb1_forged_passes_on_stderr_earn_nothing() -> None:
    report = grade(TB1, stdout=HONEST_FAIL, stderr=FORGED_STDERR, exit_code=1)
    assert report.reward == 0.0 and report.error is None, report
    assert report.extra["tests"] == {"test_add_small": "FAILED", "test_add_negative": "FAILED"}


def test_tb1_a_failed_status_anywhere_wins_over_a_later_pass() -> None:
    forged_stdout = HONEST_FAIL.replace("=====\n", "=====\n" + FORGED_STDERR, 1) + FORGED_STDERR
    report = grade(TB1, stdout=forged_stdout, exit_code=0)
    assert report.reward == 0.0, report
    assert report.extra["tests"]["test_add_small"] == "FAILED"


def test_tb1_a_failing_exit_code_is_reward_0() -> None:
    report = grade(TB1, stdout=HONEST_PASS, exit_code=1)
    assert report.reward == 0.0 and report.error is None, report
    assert report.extra["tests"] == {"test_add_small": "PASSED", "test_add_negative": "PASSED"}


def test_tb1_an_honest_pass_earns_1() -> None:
    assert grade(TB1, stdout=HONEST_PASS, exit_code=0).reward == 1.0


def test_tb1_a_final_line_counting_failures_is_reward_0() -> None:
    # every listed test passed, but pytest's own count says otherwise (a summary cut short)
    stdout = HONEST_PASS.replace("2 passed", "2 passed, 1 failed")
    assert grade(TB1, stdout=stdout, exit_code=0).reward == 0.0


@pytest.mark.parametrize(("files", "reward", "extra", "error"), [
    ({"reward.txt": b"0.25\n", "reward.json": b'{"reward": 1.0, "greeting_ok": 1.0}'}, 0.25, {"greeting_ok": 1.0}, None),
    ({"reward.txt": b"1\n", "reward.json": b'not json'}, 1.0, {}, None),
    ({"reward.json": b'{"reward": 0.5, "count_ok": 0.0}'}, 0.5, {"count_ok": 0.0}, None),
    ({"reward.json": b'{"score": 1}'}, 0.0, {"score": 1}, "reward.json has no 'reward' key (keys: score)"),
    ({"reward.txt": b"inf", "reward.json": b'{"reward": 1.0}'}, 0.0, {},
     "reward.txt is not finite: 'inf'"),
    ({}, 0.0, {}, f"the verifier wrote neither {LOGS_DIR}/reward.txt nor reward.json"),
])
def test_harbor_reads_reward_txt_first(files: dict[str, bytes], reward: float, extra: dict[str, float],
                                       error: str | None) -> None:
    report = grade(HARBOR, reward_files=files)
    assert (report.reward, report.extra, report.error) == (reward, extra, error)


@pytest.mark.parametrize(("files", "reward", "out_of_range"), [
    ({"reward.txt": b"2.5"}, 2.5, True),
    ({"reward.json": b'{"reward": -1}'}, -1.0, True),
    ({"reward.txt": b"1"}, 1.0, False),
    ({"reward.txt": b"0"}, 0.0, False),
])
def test_a_reward_outside_0_1_is_kept_and_flagged(files: dict[str, bytes], reward: float, out_of_range: bool) -> None:
    report = grade(HARBOR, reward_files=files)
    assert (report.reward, report.error) == (reward, None)
    assert report.as_info()["reward_out_of_range"] is out_of_range


def test_the_examples_are_what_these_tests_model() -> None:
    assert "pytest $TEST_DIR/test_outputs.py -rA" in Path(TB1.test_script).read_text()
