"""The grader on the fake sandbox: the result file decides, and only a fresh one counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymfleet.envs.sandbox.base import SandboxSpec
from gymfleet.envs.terminal.grader import grade
from gymfleet.envs.terminal.task import load_task
from tests.envs.terminal.conftest import write_task
from tests.envs.terminal.fake_sandbox import FakeBackend


def _result_writer(tests: list[dict[str, str]] | None, *, nonce: str = "$(cat \"$GYMFLEET_NONCE_FILE\")",
                   raw: str | None = None) -> str:
    body = raw if raw is not None else json.dumps({"nonce": "NONCE", "tests": tests})
    body = body.replace('"NONCE"', f'"{nonce}"')
    return f"#!/bin/bash\ncat > \"$GYMFLEET_RESULT_FILE\" <<EOF\n{body}\nEOF\n"


async def _grade(tmp_path: Path, run_sh: str, yaml: str = "") -> dict:
    write_task(tmp_path, "t", run_sh=run_sh, yaml=yaml)
    async with FakeBackend().create(SandboxSpec()) as sb:
        return (await grade(sb, load_task(tmp_path / "t"), ".gymfleet")).as_info()


async def test_all_passed_is_reward_1(tmp_path: Path) -> None:
    info = await _grade(tmp_path, _result_writer([{"name": "a", "status": "passed"}, {"name": "b", "status": "passed"}]))
    assert info["reward"] == 1.0 and info["error"] is None
    assert info["tests"] == {"a": "passed", "b": "passed"}


@pytest.mark.parametrize("bad", ["failed", "skipped", "error"])
async def test_one_not_passed_is_reward_0(tmp_path: Path, bad: str) -> None:
    info = await _grade(tmp_path, _result_writer([{"name": "a", "status": "passed"},
                                                  {"name": "b", "status": bad, "message": "why"}]))
    assert info["reward"] == 0.0 and info["error"] is None
    assert info["failures"] == {"b": "why"}


@pytest.mark.parametrize(
    ("run_sh", "error"),
    [
        ("#!/bin/bash\necho '5 passed' ; exit 0\n", "no result file"),
        (_result_writer(None, raw="{not json"), "malformed result file"),
        (_result_writer(None, raw='{"nonce": "NONCE", "tests": [{"name": "a", "status": "great"}]}'),
         "malformed result file"),
        (_result_writer([]), "lists no tests"),
        (_result_writer([{"name": "a", "status": "passed"}], nonce="guessed"), "nonce"),
        ("#!/bin/bash\nsleep 30\n", "timed out"),
    ],
)
async def test_grading_errors_give_0_and_say_why(tmp_path: Path, run_sh: str, error: str) -> None:
    info = await _grade(tmp_path, run_sh, yaml="instruction: x\ntest_timeout_s: 1\n")
    assert info["reward"] == 0.0
    assert error in info["error"]


TESTLIB_CHECKS = """\
import os, sys, unittest
sys.path.insert(0, os.environ["GYMFLEET_TEST_DIR"])
import gymfleet_testlib

class Checks(unittest.TestCase):
    def test_ok(self):
        pass

    def test_sub(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertLess(i, 2)

    @unittest.skip("not today")
    def test_skipped(self):
        pass

if __name__ == "__main__":
    gymfleet_testlib.main()
"""


async def test_testlib_records_passes_failed_subtests_and_skips(tmp_path: Path) -> None:
    write_task(tmp_path, "t", checks=TESTLIB_CHECKS)
    async with FakeBackend().create(SandboxSpec()) as sb:
        info = (await grade(sb, load_task(tmp_path / "t"), ".gymfleet")).as_info()
    assert info["reward"] == 0.0 and info["error"] is None
    assert info["tests"] == {"Checks.test_ok": "passed", "Checks.test_sub (i=2)": "failed",
                             "Checks.test_skipped": "skipped"}
    assert "AssertionError" in info["failures"]["Checks.test_sub (i=2)"]
