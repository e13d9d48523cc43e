"""The grader's canary (envs/swe/canary.py): where it is planted, how its outcomes are read, and
that a run whose results were rewritten in the test runner's process is not graded, on small
logs, on real pytest and unittest runs (the result class Django's runtests.py reports with) and
on a log of sympy's bin/test from a real SWE-bench Lite run."""

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
from gymfleet.envs.swe.canary import (
    WORDS,
    Canary,
    canary_candidates,
    canary_error,
    plant_canary,
    runner_of,
    takes_test_files,
)
from gymfleet.envs.swe.grading import grade_log, grade_output
from gymfleet.envs.swe.harness import InstanceResult, SWEHarness
from gymfleet.envs.swe.instances import SWEInstance, load_instances
from gymfleet.envs.swe.junit import junit_key, parse_junit
from gymfleet.envs.swe.logparse import parse_occurrences
from gymfleet.envs.swe.specs import load_spec
from tests.envs.sandbox.fakes import FakeSandbox

PARSER = upstream.log_parser("parse_log_pytest")
CANARY_FILE = re.compile(r"\S*test_[a-z]+_[a-z]+_[a-z]+\.py")
DJANGO_CMD = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
SYMPY_CMD = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"
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
    """A pytest canary in a new file (no test file's source known)."""
    planted = plant_canary("pytest -rA", test_files or ["tests/t.py"], [], {}, random.Random(seed))
    assert planted is not None and planted.original is None
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

def test_without_a_readable_test_file_a_pytest_canary_is_a_new_file_named_in_words() -> None:
    c = canary(["tests/roots/test-ext/target/conf.py", "tests/test_ext.py", "tests/b/test_b.py"])
    assert CANARY_FILE.fullmatch(c.path) and c.path.startswith("tests/test_")
    assert len(c.must_fail) == 2 and len(c.must_pass) == 2
    assert all(re.fullmatch(rf"{c.path}::test_[a-z]+(_[a-z]+)+", i) for i in c.ids)
    assert len(set(c.ids)) == 4 and not re.search(r"[0-9a-f]{8}", c.path + " ".join(c.ids))
    ast.parse(c.contents)
    other = canary(["tests/test_ext.py"], seed=1)
    assert other.path != c.path and not set(other.ids) & set(c.ids)
    assert canary(["pkg/mod_test.py", "setup.py"]).path.startswith("pkg/")
    assert canary(["test_root.py"]).path.count("/") == 0
    files = c.files(["a.py", "b.py"])
    assert sorted(files) == sorted(["a.py", "b.py", c.path])


def test_the_canary_is_appended_to_the_file_of_the_first_fail_to_pass_test() -> None:
    own = b"import pytest\n\n\ndef test_fix():\n    assert f() == 1\n\ndef test_old_value():\n    pass"
    sources = {"tests/test_a.py": b"def test_a():\n    pass\n", "tests/test_fix.py": own}
    c = plant_canary("pytest -rA", ["tests/test_a.py", "tests/test_fix.py"],
                     ["tests/test_fix.py::test_fix"], sources, random.Random(0),
                     taken=["tests/test_a.py::test_a"])
    assert c is not None and c.path == "tests/test_fix.py" and c.original == own
    assert c.position is None and c.files(["tests/test_fix.py"]) == ["tests/test_fix.py"]
    assert c.contents.startswith(own + b"\n\n\ndef test_")
    tree = ast.parse(c.contents)
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert len(names) == len(set(names)) == 6  # none of the file's own tests is redefined
    assert sorted(c.ids) == sorted(f"tests/test_fix.py::{n}" for n in names[2:])
    words = {w for i in c.ids for w in i.split("::")[1].split("_")[1:]}
    assert words <= set(WORDS) | {"fix", "old", "value"}
    # unreadable or unnamed: the first file that looks like a test
    assert plant_canary("pytest -rA", [], ["x.py::t"], sources, random.Random(0)).path == (
        "tests/test_a.py")


def test_django_and_sympy_canaries_go_into_the_fix_tests_file() -> None:
    tests_py = b"from django.test import SimpleTestCase\n\n\nclass AdminTests(SimpleTestCase):\n" \
               b"    def test_fix(self):\n        pass\n"
    sources = {"tests/admin_views/models.py": b"", "tests/admin_views/tests.py": tests_py}
    c = plant_canary(DJANGO_CMD, ["admin_views.models", "admin_views.tests"],
                     ["test_fix (admin_views.tests.AdminTests)"], sources, random.Random(0))
    assert c is not None and c.runner == "django" and c.path == "tests/admin_views/tests.py"
    assert c.position is None  # the command's labels are unchanged
    classes = [n for n in ast.parse(c.contents).body if isinstance(n, ast.ClassDef)]
    assert len(classes) == 2 and classes[1].name.endswith("Tests")
    assert all(re.fullmatch(rf"test_[a-z_]+ \(admin_views\.tests\.{classes[1].name}\)", i)
               for i in c.ids)
    assert c.log_keys(c.ids[0])[1] == c.ids[0][:-1] + "." + c.ids[0].split()[0] + ")"
    sympy = {"sympy/core/tests/test_a.py": b"def test_a():\n    pass\n",
             "sympy/core/tests/test_b.py": b"def test_issue_1():\n    pass\n"}
    s = plant_canary(SYMPY_CMD, list(sympy), ["test_issue_1"], sympy, random.Random(0))
    assert s is not None and s.runner == "sympy" and s.path == "sympy/core/tests/test_b.py"
    assert all(re.fullmatch(r"test_[a-z_]+", i) for i in s.ids) and s.position is None
    assert canary_candidates(SYMPY_CMD, "diff --git a/x/conftest.py b/x/conftest.py\n"
                             "diff --git a/x/test_y.py b/x/test_y.py\n") == ["x/test_y.py"]


def test_which_commands_get_a_canary() -> None:
    assert takes_test_files("pytest -rA") and takes_test_files("python -m pytest -rA")
    assert takes_test_files("tox --current-env -epy39 -v --")
    assert not takes_test_files("tox -epy39")
    assert runner_of("pytest -rA") == "pytest" and runner_of("tox -epy39 -v --") == "pytest"
    assert runner_of(DJANGO_CMD) == "django" and runner_of(SYMPY_CMD) == "sympy"
    assert runner_of("python -m unittest -v") is None and runner_of("tox -epy39") is None
    assert plant_canary("python -m unittest -v", ["tests/a.py"], [], {}) is None
    assert plant_canary(DJANGO_CMD, ["admin_views.tests"], [], {}) is None  # nothing read
    assert plant_canary("pytest -rA", [], [], {}) is None
    assert plant_canary("pytest -rA", ["docs/index.rst"], [], {}) is None


def test_every_instance_of_lite_gets_a_canary_in_a_file_its_test_command_runs(
        lite_rows: list[dict[str, Any]]) -> None:
    counts: dict[str, int] = {}
    for r in lite_rows:
        inst = SWEInstance.model_validate(r)
        spec = load_spec(inst.repo, inst.version)
        files = spec.test_directives(inst.row())
        candidates = canary_candidates(spec.test_cmd, inst.test_patch)
        c = plant_canary(spec.test_cmd, files, inst.FAIL_TO_PASS,
                         {p: b"" for p in candidates}, taken=inst.PASS_TO_PASS)
        assert c is not None, inst.instance_id
        counts[c.runner] = counts.get(c.runner, 0) + 1
        assert c.position is None and c.path in candidates, (inst.instance_id, c.path)
        assert not set(c.ids) & {*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS}
        module = f"({c.path.removeprefix('tests/')[:-3].replace('/', '.')}."
        named = [i for i in inst.FAIL_TO_PASS if "::" in i or " (" in i]
        if c.runner != "sympy" and named:  # the first FAIL_TO_PASS test's file
            assert named[0].startswith(f"{c.path}::") or module in named[0], inst.instance_id
        command = scripts.test_run_script(inst, spec, canary=c).rstrip().splitlines()[-1]
        assert command == " ".join([spec.test_cmd, *files]) + " 2>&1"  # unchanged
    assert counts["pytest"] >= 100 and counts["django"] >= 100 and counts["sympy"] >= 70, counts


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


# ---- Django's and sympy's logs ---------------------------------------------------------------

DJANGO_PARSER = upstream.log_parser("parse_log_django")
SYMPY_PARSER = upstream.log_parser("parse_log_sympy")
# sympy__sympy-24909's test run with the fix, as bin/test printed it in the grading sandbox
# (real run; the canary's four tests are the last four; a file's last test line carries [FAIL])
SYMPY_LOG = """sympy/physics/units/tests/test_prefixes.py[8]
test_prefix_operations ok
test_prefix_unit ok
test_bases ok
test_repr ok
test_format_bases F
test_items_values ok
test_parse_path_basic ok
test_subclass_size_handle F                                               [FAIL]


________________________________________________________________________________
________ sympy/physics/units/tests/test_prefixes.py::test_format_bases _________
Traceback (most recent call last):
  File "/testbed/sympy/physics/units/tests/test_prefixes.py", line 90, in test_format_bases
    assert len('pdvyurqsum') == 11
AssertionError
________________________________________________________________________________
____ sympy/physics/units/tests/test_prefixes.py::test_subclass_size_handle _____
Traceback (most recent call last):
  File "/testbed/sympy/physics/units/tests/test_prefixes.py", line 102, in test_subclass_size_handle
    assert sorted([388878, 105783, 79263]) == [388878, 105783, 79263]
AssertionError

============= tests finished: 6 passed, 2 failed, in 0.16 seconds ==============
"""
SYMPY_PATH = "sympy/physics/units/tests/test_prefixes.py"
SYMPY_CANARY = Canary("sympy", SYMPY_PATH, b"", "", ("test_format_bases", "test_subclass_size_handle"),
                      ("test_items_values", "test_parse_path_basic"))


def test_a_sympy_log_reads_as_planted_and_the_canary_is_not_graded() -> None:
    f2p, p2p = ["test_prefix_operations"], ["test_prefix_unit", "test_bases"]
    found = parse_occurrences(SYMPY_LOG, SYMPY_PARSER)
    assert found["test_subclass_size_handle"] == ["FAILED"]  # the file's last line, [FAIL]
    assert canary_error(SYMPY_CANARY, found, None) is None
    grade = grade_output(SYMPY_LOG, 1, f2p, p2p, SYMPY_PARSER, canary=SYMPY_CANARY)
    assert grade.graded and grade.resolved, grade.error
    assert not any(c in k for k in grade.status_map for c in SYMPY_CANARY.ids)
    # sympy's reporter patched to report every failure as a pass (the hostile run's log)
    flipped = re.sub(r" F( +\[FAIL\])?$", lambda m: " ok" + (" " * 40 + "[OK]" if m.group(1)
                     else ""), SYMPY_LOG.split("\n\n")[0], flags=re.M)
    flipped = flipped.replace("test_prefix_operations ok", "test_prefix_operations ok")
    grade = grade_output(flipped, 0, f2p, p2p, SYMPY_PARSER, canary=SYMPY_CANARY)
    assert not grade.resolved and grade.error == (
        "test outcomes were rewritten in sympy's test runner's process (the grader's canary test "
        "that must fail read PASSED in the log)")
    assert grade_output(flipped, 0, f2p, p2p, SYMPY_PARSER).resolved  # fooled without it


@pytest.mark.parametrize("long_form", [False, True])
def test_a_django_log_reads_as_planted_in_both_unittest_id_forms(long_form: bool) -> None:
    sources = {"tests/admin_views/tests.py": b"class AdminTests:\n    def test_fix(self): pass\n"}
    c = plant_canary(DJANGO_CMD, ["admin_views.tests"], ["test_fix (admin_views.tests.AdminTests)"],
                     sources, random.Random(0))
    assert c is not None

    def name(ident: str) -> str:
        return c.log_keys(ident)[1] if long_form else ident
    lines = ["test_fix (admin_views.tests.AdminTests) ... ok"]
    lines += [f"{name(i)} ... FAIL" for i in c.must_fail]
    lines += [f"{name(i)} ... ok" for i in c.must_pass]
    lines += ["", "=" * 70, *[f"FAIL: {name(i)}\n" + "-" * 70 + "\nAssertionError"
                            for i in c.must_fail]]
    log = "\n".join(lines) + "\n"
    assert canary_error(c, parse_occurrences(log, DJANGO_PARSER), None) is None
    grade = grade_output(log, 1, ["test_fix (admin_views.tests.AdminTests)"], [], DJANGO_PARSER,
                         canary=c)
    assert grade.resolved and set(grade.status_map) == {"test_fix (admin_views.tests.AdminTests)"}
    flipped = "\n".join(lines[:5]).replace("... FAIL", "... ok") + "\n"
    error = canary_error(c, parse_occurrences(flipped, DJANGO_PARSER), None)
    assert error == ("test outcomes were rewritten in Django's test runner's process (the "
                     "grader's canary test that must fail read PASSED in the log)")


# ---- real pytest and unittest runs -----------------------------------------------------------

T_SOURCE = "def test_fix():\n    assert 1 == 2\n\ndef test_old():\n    pass\n"


def planted(mode: str, seed: int, cmd: str = "pytest -rA", path: str = "tests/t.py",
            source: str = T_SOURCE, f2p: str = "tests/t.py::test_fix") -> Canary:
    """A canary in a new file (``new``) or appended to ``path`` (``append``)."""
    sources = {path: source.encode()} if mode == "append" else {}
    c = plant_canary(cmd, [path], [f2p], sources, random.Random(seed))
    assert c is not None and (c.original is None) is (mode == "new")
    return c


def write_tree(root: Path, c: Canary, path: str = "tests/t.py", source: str = T_SOURCE) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(source)
    (root / c.path).write_bytes(c.contents)


def run_pytest(root: Path, c: Canary, plugin: str | None) -> tuple[str, int, Any]:
    write_tree(root, c)
    args = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "--tb=no",
            "--junitxml=out/j.xml", *c.files(["tests/t.py"])]
    if plugin:
        (root / "flip_plugin.py").write_text(plugin)
        args[3:3] = ["-p", "flip_plugin"]
    run = subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    junit = parse_junit((root / "out/j.xml").read_bytes())
    return run.stdout + run.stderr, run.returncode, junit


@pytest.mark.parametrize(("mode", "seed"), [("new", 0), ("new", 1), ("append", 0), ("append", 1)])
def test_a_real_pytest_run_reads_as_planted_and_a_flipping_one_does_not(
        tmp_path: Path, mode: str, seed: int) -> None:
    c = planted(mode, seed)
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


UNIT_SOURCE = """import unittest

import flip  # the code under test, imported by the tests


class FixTests(unittest.TestCase):
    def test_fix(self):
        self.assertEqual(1, 2)

    def test_old(self):
        pass
"""
# what a patch could add to a package the tests import: unittest's result (the one Django's
# runtests.py reports with: DiscoverRunner runs a unittest.TextTestRunner) turns failures and
# errors into successes
FLIP_UNITTEST = """import unittest
unittest.TestResult.addFailure = lambda self, test, err: self.addSuccess(test)
unittest.TextTestResult.addFailure = lambda self, test, err: self.addSuccess(test)
unittest.TextTestResult.addError = lambda self, test, err: self.addSuccess(test)
"""


@pytest.mark.parametrize("seed", [0, 1])
def test_a_real_unittest_run_reads_as_planted_and_a_flipping_one_does_not(
        tmp_path: Path, seed: int) -> None:
    ids = {"f2p": [], "p2p": []}  # filled from the run: unittest's id form depends on Python
    c = planted("append", seed, DJANGO_CMD, "tests/fix_app/tests.py", UNIT_SOURCE,
                "test_fix (fix_app.tests.FixTests)")
    for flip in (False, True):
        root = tmp_path / str(flip)
        write_tree(root, c, "tests/fix_app/tests.py", UNIT_SOURCE)
        (root / "tests/fix_app/__init__.py").write_text("")
        (root / "tests/flip.py").write_text(FLIP_UNITTEST if flip else "")
        run = subprocess.run([sys.executable, "-m", "unittest", "-v", "fix_app.tests"],
                             cwd=root / "tests", capture_output=True, text=True, timeout=300)
        output = run.stdout + run.stderr
        found = parse_occurrences(output, DJANGO_PARSER)
        ids["f2p"] = [k for k in found if k.startswith("test_fix (")]
        ids["p2p"] = [k for k in found if k.startswith("test_old (")]
        assert ids["f2p"] and ids["p2p"], output
        grade = grade_output(output, run.returncode, ids["f2p"], ids["p2p"], DJANGO_PARSER,
                             canary=c)
        without = grade_output(output, run.returncode, ids["f2p"], ids["p2p"], DJANGO_PARSER)
        if not flip:
            assert run.returncode == 1 and canary_error(c, found, None) is None, output
            assert grade.graded and not grade.resolved  # test_fix really fails
            continue
        assert run.returncode == 0 and without.resolved, output  # fooled without the canary
        assert not grade.resolved and grade.error == (
            "test outcomes were rewritten in Django's test runner's process (the grader's "
            "canary test that must fail read PASSED in the log)")


# ---- the harness plants it, runs it and removes it ------------------------------------------

class PytestLikeSandbox(FakeSandbox):
    """Answers the harness's test command as pytest would: the instance's expected tests pass,
    each canary test's ``assert`` is evaluated (every result flipped to passed when ``flip``),
    and the JUnit report it asks for is written; understands ``rm -f``, ``test -e`` and the
    harness's overwrite (``cat STAGED > TARGET``)."""

    def __init__(self, expected: list[str], flip: bool = False) -> None:
        super().__init__(SandboxSpec(), SandboxLabels())
        self.expected, self.flip = expected, flip
        self.commands: list[str] = []
        self.run_files: dict[str, bytes] = {}
        self.every_name_taken = False

    async def exec(self, cmd: str, timeout_s: float = 60.0, workdir: str | None = None,
                   env: dict[str, str] | None = None) -> ExecResult:
        self.commands.append(cmd)
        if cmd.startswith("rm -f "):
            for word in shlex.split(cmd)[2:]:
                for path in [p for p in self.files if p == word or (
                        word.endswith("*") and p.startswith(word[:-1]))]:
                    del self.files[path]
            return ExecResult(0, "", "", 0.0)
        if cmd.startswith("test -e "):
            taken = cmd.split()[2] in self.files or self.every_name_taken
            return ExecResult(0 if taken else 1, "", "", 0.0)
        overwrite = re.search(r"cat (\S+) > (\S+) &&", cmd)
        if overwrite:
            self.files[overwrite.group(2)] = self.files.pop(overwrite.group(1))
            return ExecResult(0, "", "", 0.0)
        self.run_files = dict(self.files)
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
    # no test file to read: a new file among the arguments
    cleanup, exists, test_command, removal = sandbox.commands
    assert cleanup == f"rm -f {scripts.EVAL_SCRIPT_PATH} {scripts.PATCH_PATH}"
    assert exists.startswith(f"test -e {scripts.REPO_DIR}/tests/test_")
    planted = set(CANARY_FILE.findall(test_command))
    assert len(planted) == 1 and planted.pop().startswith("tests/test_")
    assert removal.startswith(f"rm -f {scripts.REPO_DIR}/tests/test_")
    assert not [p for p in sandbox.files if p.startswith(f"{scripts.REPO_DIR}/")]
    assert result.grade is not None and result.resolved is not flip
    assert ("rewritten in pytest's process" in (result.grade.error or "")) is flip


@pytest.mark.parametrize("flip", [False, True])
def test_the_harness_appends_the_canary_to_the_fix_tests_file_and_puts_it_back(
        flip: bool) -> None:
    inst = load_instances("fixtures")[0]
    spec = load_spec(inst.repo, inst.version)
    path = f"{scripts.REPO_DIR}/tests/test_subclass.py"
    own = b"def test_replace_from_subclass():\n    pass\n"
    sandbox = PytestLikeSandbox([*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS], flip)
    sandbox.files[path] = own
    result = InstanceResult(inst.instance_id, "gold", inst.patch)
    asyncio.run(SWEHarness()._run_tests(sandbox, inst, spec, False, result))
    test_command = scripts.test_run_script(inst, spec, junit_path="J").splitlines()[-1]
    ran = [c for c in sandbox.commands if "--junitxml" in c]
    assert len(ran) == 1 and re.sub(r"--junitxml=\S+", "--junitxml=J", ran[0].splitlines()[-1]) == (
        test_command)  # the command line is the run's own
    during = sandbox.run_files[path]
    assert during.startswith(own) and during.count(b"def test_") == 5
    # put back as the test patch left it; nothing else left in the repository or /tmp's stage
    assert sandbox.files[path] == own
    assert [p for p in sandbox.files if p != path and "/junit.xml" not in p] == []
    assert any("touch -d" in c for c in sandbox.commands)  # its modification time is kept
    assert result.grade is not None and result.resolved is not flip
    assert ("rewritten in pytest's process" in (result.grade.error or "")) is flip


def test_the_stored_test_output_says_the_canary_failures_are_planted_and_expected() -> None:
    """Issue 41, 9c: a resolved instance's test_output.txt read "2 failed" and exit status 1 with
    no word of why. The log now names the canary's tests after the exit status, and the stored log
    still grades as resolved."""
    inst = load_instances("fixtures")[0]
    spec = load_spec(inst.repo, inst.version)
    sandbox = PytestLikeSandbox([*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS])
    result = InstanceResult(inst.instance_id, "gold", inst.patch)
    asyncio.run(SWEHarness()._run_tests(sandbox, inst, spec, False, result))
    assert result.resolved and ">>>>> Test Exit Code: 1" in result.test_log
    note = result.test_log.split(">>>>> Test Exit Code: 1\n", 1)[1]
    assert note.strip().startswith(">>>>> gymfleet: the grader's canary: 4 tests in tests/test_")
    assert "planted by gymfleet" in note and "Expected to FAIL" in note
    failing = note.split("Expected to FAIL", 1)[1].split("Expected to pass", 1)[0]
    passing = note.split("Expected to pass", 1)[1]
    ids = re.findall(r"FAILED (\S+)", result.test_log)
    assert len(ids) == 2 and all(i in failing and i not in passing for i in ids)
    assert len(re.findall(r"tests/test_\w+\.py::test_\w+", passing)) == 2
    stored = grade_log(result.test_log, inst.FAIL_TO_PASS, inst.PASS_TO_PASS, PARSER)
    assert stored.graded and stored.resolved and stored.test_exit_code == 1


def test_a_new_canary_file_never_overwrites_one_of_the_repository() -> None:
    inst = load_instances("fixtures")[0]
    spec = load_spec(inst.repo, inst.version)
    sandbox = PytestLikeSandbox([*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS])
    sandbox.every_name_taken = True
    result = InstanceResult(inst.instance_id, "gold", inst.patch)
    asyncio.run(SWEHarness()._run_tests(sandbox, inst, spec, False, result))
    assert [c.split()[0] for c in sandbox.commands[1:4]] == ["test"] * 3  # three names drawn
    assert not sandbox.files.keys() - {p for p in sandbox.files if "/junit.xml" in p}
    assert not CANARY_FILE.search(sandbox.commands[-1]) and result.resolved  # no canary then
