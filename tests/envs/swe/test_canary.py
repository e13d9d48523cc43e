"""The grader's canary (envs/swe/canary.py): where it is planted, how its outcomes are read, and
that a run whose reports were rewritten in pytest's process is not graded, on small logs and on
real pytest runs."""

from __future__ import annotations

import ast
import asyncio
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gymfleet.envs.sandbox.base import ExecResult, SandboxLabels, SandboxSpec
from gymfleet.envs.swe import patch as scripts
from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.canary import Canary, canary_error, plant_canary, takes_test_files
from gymfleet.envs.swe.grading import grade_output
from gymfleet.envs.swe.harness import InstanceResult, SWEHarness
from gymfleet.envs.swe.instances import SWEInstance, load_instances
from gymfleet.envs.swe.junit import junit_key, parse_junit
from gymfleet.envs.swe.logparse import parse_occurrences
from gymfleet.envs.swe.specs import load_spec
from tests.envs.sandbox.fakes import FakeSandbox

PARSER = upstream.log_parser("parse_log_pytest")
CANARY_ID = re.compile(r"\S*test_[0-9a-f]{12}\.py")
F2P, P2P = ["tests/t.py::test_fix"], ["tests/t.py::test_old"]
# flips every failing report to passed, as agent code imported by the tests could at import
FLIP_ALL = '''import _pytest.reports as _r
_made = _r.TestReport.from_item_and_call.__func__
def _flipped(cls, item, call):
    report = _made(cls, item, call)
    if report.failed:
        report.outcome, report.longrepr = "passed", None
    return report
_r.TestReport.from_item_and_call = classmethod(_flipped)
'''


def canary(test_files: list[str] | None = None, seed: int = 0) -> Canary:
    planted = plant_canary("pytest -rA", test_files or ["tests/t.py"], random.Random(seed))
    assert planted is not None
    return planted


def honest_output(c: Canary, fix: str = "PASSED") -> str:
    lines = [f"{fix} {F2P[0]}", f"PASSED {P2P[0]}"]
    lines += [f"FAILED {i} - assert 1 + 2 == 4" for i in c.must_fail]
    lines += [f"PASSED {i}" for i in c.must_pass]
    return "\n".join(lines) + "\n"


def junit_of(output: str) -> dict[tuple[str, str], list[str]]:
    """The JUnit report pytest would write for ``output``'s summary lines."""
    return {junit_key(k): v for k, v in parse_occurrences(output, PARSER).items()}


# ---- where the canary goes ---------------------------------------------------------------

def test_the_canary_sits_beside_the_first_test_file_with_random_names() -> None:
    c = canary(["tests/roots/test-ext/target/conf.py", "tests/test_ext.py", "tests/b/test_b.py"])
    assert c.path.startswith("tests/test_") and c.path.endswith(".py")
    assert len(c.must_fail) == 2 and len(c.must_pass) == 2
    assert all(i.startswith(f"{c.path}::test_") for i in c.ids) and len(set(c.ids)) == 4
    ast.parse(c.source)
    other = canary(["tests/test_ext.py"], seed=1)
    assert other.path != c.path and not set(other.ids) & set(c.ids)
    assert canary(["pkg/mod_test.py", "setup.py"]).path.startswith("pkg/")
    assert canary(["test_root.py"]).path.count("/") == 0
    files = c.files(["a.py", "b.py"])
    assert sorted(files) == sorted(["a.py", "b.py", c.path])


def test_only_commands_that_take_pytests_file_arguments_get_a_canary() -> None:
    assert takes_test_files("pytest -rA") and takes_test_files("python -m pytest -rA")
    assert takes_test_files("tox --current-env -epy39 -v --")
    assert not takes_test_files("tox -epy39")
    assert plant_canary("./tests/runtests.py --verbosity 2", ["tests/a.py"]) is None
    assert plant_canary("PYTHONWARNINGS='ignore' bin/test -C --verbose", ["sympy/t.py"]) is None
    assert plant_canary("pytest -rA", []) is None
    assert plant_canary("pytest -rA", ["docs/index.rst"]) is None


def test_every_pytest_instance_of_lite_gets_a_canary_in_its_test_command(
        lite_rows: list[dict[str, Any]]) -> None:
    counts = {"canary": 0, "none": 0}
    for r in lite_rows:
        inst = SWEInstance.model_validate(r)
        spec = load_spec(inst.repo, inst.version)
        files = spec.test_directives(inst.row())
        c = plant_canary(spec.test_cmd, files)
        if c is None:
            assert inst.repo in ("django/django", "sympy/sympy"), inst.instance_id
            counts["none"] += 1
            continue
        counts["canary"] += 1
        folders = {str(Path(f).parent) for f in files}
        assert str(Path(c.path).parent) in folders, (inst.instance_id, c.path, files)
        command = scripts.test_run_script(inst, spec, canary=c).rstrip().splitlines()[-1]
        assert command.split().count(c.path) == 1 and all(f in command for f in files)
    assert counts["canary"] >= 100 and counts["none"] >= 150, counts


# ---- reading its outcomes ------------------------------------------------------------------

def test_an_honest_run_with_the_canary_resolves_and_its_ids_are_not_graded() -> None:
    c = canary()
    output = honest_output(c)
    assert canary_error(c, parse_occurrences(output, PARSER), junit_of(output)) is None
    # the canary's failing tests make pytest exit 1: not a crash
    grade = grade_output(output, 1, F2P, P2P, PARSER, junit=junit_of(output),
                         require_junit=True, canary=c)
    assert grade.graded and grade.resolved, grade.error
    assert not set(grade.status_map) & set(c.ids)
    listed = [t for group in grade.tests_status.as_dict().values() for ids in group.values()
              for t in ids]
    assert sorted(listed) == sorted(F2P + P2P)
    failing = grade_output(honest_output(c, fix="FAILED"), 1, F2P, P2P, PARSER,
                           junit=junit_of(honest_output(c, fix="FAILED")), canary=c)
    assert failing.graded and not failing.resolved
    assert failing.tests_status.FAIL_TO_PASS["failure"] == F2P


def test_a_canary_that_must_fail_reading_passed_makes_the_run_unresolved() -> None:
    c = canary()
    flipped = honest_output(c).replace("FAILED", "PASSED").replace(" - assert 1 + 2 == 4", "")
    grade = grade_output(flipped, 0, F2P, P2P, PARSER, junit=junit_of(flipped),
                         require_junit=True, canary=c)
    assert not grade.graded and not grade.resolved
    assert grade.error == ("test outcomes were rewritten in pytest's process (the grader's canary "
                           "test that must fail read PASSED in the log)")
    assert grade.tests_status.FAIL_TO_PASS["failure"] == F2P
    assert not any(i in grade.error for i in c.ids)


def test_the_junit_report_must_agree_with_the_planted_outcomes_too() -> None:
    c = canary()
    output = honest_output(c)
    junit = junit_of(output)
    junit[junit_key(c.must_pass[0])] = ["FAILED"]
    error = canary_error(c, parse_occurrences(output, PARSER), junit)
    assert error is not None and "must pass read FAILED in the JUnit report" in error
    del junit[junit_key(c.must_pass[0])]
    error = canary_error(c, parse_occurrences(output, PARSER), junit)
    assert error is not None and "no result in the JUnit report" in error


def test_a_run_without_the_canarys_results_is_not_graded() -> None:
    c = canary()
    # forged lines (and a JUnit file of its own) that know the run's tests but not the canary
    forged = f"PASSED {F2P[0]}\nPASSED {P2P[0]}\n"
    grade = grade_output(forged, 0, F2P, P2P, PARSER, junit=junit_of(forged),
                         require_junit=True, canary=c)
    assert not grade.resolved and "canary test that must fail has no result in the log" in (
        grade.error or "")
    # without a canary the same run resolves: what the canary closes
    assert grade_output(forged, 0, F2P, P2P, PARSER, junit=junit_of(forged),
                        require_junit=True).resolved
    # exit 1 with only the canary failing is not a crash; exit 2 still is
    crashed = grade_output(honest_output(c), 2, F2P, P2P, PARSER, canary=c)
    assert (crashed.error or "").startswith("the test command exited 2")


# ---- real pytest runs ------------------------------------------------------------------------

def run_pytest(root: Path, c: Canary, plugin: str | None) -> tuple[str, int, Any]:
    (root / "tests").mkdir(parents=True, exist_ok=True)
    (root / "tests/t.py").write_text("def test_fix():\n    assert 1 == 2\n\n"
                                     "def test_old():\n    pass\n")
    (root / c.path).write_text(c.source)
    args = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "--tb=no",
            "--junitxml=out/j.xml", *c.files(["tests/t.py"])]
    if plugin:
        (root / "flip_plugin.py").write_text(plugin)
        args[3:3] = ["-p", "flip_plugin"]
    run = subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    junit = parse_junit((root / "out/j.xml").read_bytes())
    return run.stdout + run.stderr, run.returncode, junit


@pytest.mark.parametrize("seed", [0, 1])
def test_a_real_pytest_run_reads_as_planted_and_a_flipping_one_does_not(
        tmp_path: Path, seed: int) -> None:
    c = canary(["tests/t.py"], seed)
    output, code, junit = run_pytest(tmp_path / "honest", c, None)
    assert code == 1 and canary_error(c, parse_occurrences(output, PARSER), junit) is None, output
    grade = grade_output(output, code, ["tests/t.py::test_fix"], ["tests/t.py::test_old"], PARSER,
                         junit=junit, require_junit=True, canary=c)
    assert grade.graded and not grade.resolved  # test_fix really fails
    output, code, junit = run_pytest(tmp_path / "flipped", c, FLIP_ALL)
    assert code == 0 and "PASSED tests/t.py::test_fix" in output, output
    without = grade_output(output, code, ["tests/t.py::test_fix"], ["tests/t.py::test_old"],
                           PARSER, junit=junit, require_junit=True)
    assert without.resolved  # the flip fools the log and the JUnit report alike
    grade = grade_output(output, code, ["tests/t.py::test_fix"], ["tests/t.py::test_old"], PARSER,
                         junit=junit, require_junit=True, canary=c)
    assert not grade.resolved and "rewritten in pytest's process" in (grade.error or "")


# ---- the harness plants it, runs it and removes it ------------------------------------------

class PytestLikeSandbox(FakeSandbox):
    """Answers the harness's test command as pytest would: the instance's expected tests pass,
    each canary test's ``assert`` is evaluated (every result flipped to passed when ``flip``),
    and the JUnit report it asks for is written; understands ``rm -f``."""

    def __init__(self, expected: list[str], flip: bool = False) -> None:
        super().__init__(SandboxSpec(), SandboxLabels())
        self.expected, self.flip = expected, flip
        self.commands: list[str] = []

    async def exec(self, cmd: str, timeout_s: float = 60.0, workdir: str | None = None,
                   env: dict[str, str] | None = None) -> ExecResult:
        self.commands.append(cmd)
        if cmd.startswith("rm -f "):
            for word in shlex.split(cmd)[2:]:
                for path in [p for p in self.files if p == word or (
                        word.endswith("*") and p.startswith(word[:-1]))]:
                    del self.files[path]
            return ExecResult(0, "", "", 0.0)
        results = {t: True for t in self.expected}
        for path in re.findall(r"(\S+\.py)\b", cmd.splitlines()[-1]):
            source = self.files.get(f"{scripts.REPO_DIR}/{path}", b"").decode()
            for name, expr in re.findall(r"def (\w+)\(\):\n    assert (.+)\n", source):
                results[f"{path}::{name}"] = bool(eval(expr)) or self.flip
        junit = re.search(r"--junitxml=(\S+)", cmd)
        if junit:
            cases = "".join(f'<testcase classname="{c}" name="{n}">'
                            f'{"" if ok else "<failure/>"}</testcase>'
                            for (c, n), ok in ((junit_key(t), ok) for t, ok in results.items()))
            xml = f"<testsuites><testsuite>{cases}</testsuite></testsuites>"
            self.files[junit.group(1)] = xml.encode()
        lines = [f"PASSED {t}" if ok else f"FAILED {t} - assert" for t, ok in results.items()]
        return ExecResult(0 if all(results.values()) else 1, "\n".join(lines) + "\n", "", 0.0)


@pytest.mark.parametrize("flip", [False, True])
def test_the_harness_plants_the_canary_for_the_run_only(flip: bool) -> None:
    inst = load_instances("fixtures")[0]
    spec = load_spec(inst.repo, inst.version)
    sandbox = PytestLikeSandbox([*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS], flip)
    result = InstanceResult(inst.instance_id, "gold", inst.patch)
    asyncio.run(SWEHarness()._run_tests(sandbox, inst, spec, False, result))
    test_command, removal = sandbox.commands
    planted = set(CANARY_ID.findall(test_command))
    assert len(planted) == 1 and planted.pop().startswith("tests/test_")
    assert removal.startswith(f"rm -f {scripts.REPO_DIR}/tests/test_")
    assert not [p for p in sandbox.files if p.startswith(f"{scripts.REPO_DIR}/")]
    assert result.grade is not None and result.resolved is not flip
    assert ("rewritten in pytest's process" in (result.grade.error or "")) is flip
