"""The grader's canary: tests with outcomes known beforehand, planted in the evaluation's test run
so that a run whose results were rewritten inside the test runner's process shows it.

The code under test runs in the test runner's own process (pytest, Django's ``runtests.py``,
sympy's ``bin/test``), so the agent's code (imported by the tests) can rewrite the runner's
results in memory (pytest's reports, unittest's ``TestResult``, sympy's reporter), or write a
JUnit report of its own and exit. Right before the test run (the agent is gone; its sandbox
never held the canary) the harness appends tests to a test file the test patch wrote: the file
of the first FAIL_TO_PASS test when the run's sources show it, else the first test file of the
test patch. So the run's command line does not change, the file is one git already shows as
changed by the test patch, and the canary's tests are collected, and skipped or not, as the
fix's own test is. Their names are made of words from the run's test names and a word list
(``test_prefix_units_operations``; Django: a ``unittest.TestCase`` class named likewise);
some must fail (an equality on random values that is false) and some must pass. The grader
then requires each canary test's outcome in the log, and in pytest's JUnit report when the run
has one, to be exactly the planted one (:func:`canary_error`); any other reading makes the run
unresolved. The canary's ids are taken out of the results before grading
(:func:`without_canary`), so they never reach FAIL_TO_PASS/PASS_TO_PASS or ``report.json``.
After the run the file is put back as the test patch left it.

Runners (:data:`RUNNERS`, picked from the spec's test command): ``pytest``/``python -m pytest``
and ``tox ... --`` (posargs handed to pytest); Django's ``runtests.py`` (its log's
``test_x (module.Class) ... ok`` lines and ``FAIL:`` headers, in both of unittest's id forms,
and the bare ``test_x`` swebench's parser keys a header by);
sympy's ``bin/test`` (its ``test_x ok``/``F``/``E`` lines, the file's last one ending in
``[OK]``/``[FAIL]``, and its ``____ path:test_x ____`` or ``path::test_x`` failure banners). When no test file of the run can be read, a pytest run gets the canary as a new file
beside its first test file, added to the command's file arguments; the others get none.

This catches a rewrite that cannot tell the canary from the run's own tests (every failure made
a pass, a report of its own, an early exit). What it cannot catch is inherent to running the
tests in one process with the code under test, in this harness and in SWE-bench's alike: that
code can read the test files' sources, and the canary's tests are there to be read (code that
knows which tests the published lists hold, or that recognises a test asserting on literals,
can spare exactly those). See ``docs/swe.md``, "The canary".
"""

from __future__ import annotations

import random
import re
import secrets
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from gymfleet.envs.swe.junit import JunitReports, junit_key, runs_pytest
from gymfleet.envs.swe.logparse import Occurrences

N_MUST_FAIL = 2
"""Canary tests whose assertion is false."""
N_MUST_PASS = 2
"""Canary tests whose assertion is true."""
MAX_SOURCE_BYTES = 4 * 1024 * 1024
"""Largest test file the canary is appended to (a bigger one is not read)."""
# words of test names, mixed with the run's own, so names read like a test suite's
WORDS = (
    "args", "basic", "boundary", "cache", "call", "case", "check", "config", "copy", "default",
    "empty", "equal", "error", "field", "format", "handle", "invalid", "items", "keys", "kwargs",
    "large", "length", "list", "lookup", "merge", "missing", "mixed", "name", "negative",
    "nested", "none", "order", "parse", "path", "print", "range", "repr", "reset", "result",
    "simple", "single", "size", "sort", "split", "state", "string", "subclass", "type", "update",
    "value", "values", "zero",
)


@dataclass(frozen=True)
class Canary:
    """One planted canary.

    Attributes:
        runner: the test runner's name in :data:`RUNNERS`.
        path: the file holding the canary, relative to the repository (``tests/test_x.py``).
        original: that file's bytes before the canary, None when the canary is a new file.
        code: the Python source the canary adds (appended to ``original``).
        must_fail: ids (as the runner's log names them) of its tests that must fail.
        must_pass: ids of its tests that must pass.
        position: a new file's index among the test command's file arguments (None: appended).
    """

    runner: str
    path: str
    original: bytes | None
    code: str
    must_fail: tuple[str, ...]
    must_pass: tuple[str, ...]
    position: int | None = None

    @property
    def ids(self) -> tuple[str, ...]:
        """Every canary test's id."""
        return (*self.must_fail, *self.must_pass)

    @property
    def contents(self) -> bytes:
        """The file's bytes during the run."""
        original = self.original or b""
        newline = b"" if not original or original.endswith(b"\n") else b"\n"
        return original + newline + self.code.encode()

    def log_note(self) -> str:
        """The lines the harness writes after the exit status in ``test_output.txt``: which of
        the log's tests gymfleet planted, and that the failures and exit status they cause are
        expected (a resolved run otherwise reads "2 failed", exit status 1, with no word why)."""
        return (f"\n>>>>> gymfleet: the grader's canary: {len(self.ids)} tests in {self.path} "
                "were planted by gymfleet (not the instance's tests) to catch rewritten results "
                "(docs/swe.md, \"The canary\"). Expected to FAIL, and counted in the failures "
                f"and the non-zero exit status above: {', '.join(self.must_fail)}. Expected to "
                f"pass: {', '.join(self.must_pass)}. They are taken out before grading "
                "(report.json names none of them).\n")

    def log_keys(self, ident: str) -> tuple[str, ...]:
        """The keys the log parser may give the canary test ``ident`` (unittest's two id forms,
        sympy's failure banner)."""
        return RUNNERS[self.runner].log_keys(self.path, ident)

    def files(self, test_files: list[str]) -> list[str]:
        """``test_files`` with a new canary file inserted at its position (unchanged when the
        canary is appended to one of them)."""
        files = list(test_files)
        if self.position is not None:
            files.insert(min(self.position, len(files)), self.path)
        return files


@dataclass(frozen=True)
class Runner:
    """How one test runner finds, names and reports tests (an entry of :data:`RUNNERS`).

    Attributes:
        holds: ``(path, source, expected id) -> bool``: the file defines that test.
        test_id: ``(path, class name, function name) -> id`` as the runner's log names it.
        log_keys: ``(path, id) -> keys`` the log parser may give that test.
        render: ``(tests, class name) -> source``: the canary's code, ``tests`` being
            ``(name, left, right)`` equalities.
        process: whose process the results are rewritten in, for messages.
        new_file: a new canary file may be added to the command's file arguments.
    """

    holds: Callable[[str, str, str], bool]
    test_id: Callable[[str, str, str], str]
    log_keys: Callable[[str, str], tuple[str, ...]]
    render: Callable[[list[tuple[str, str, str]], str], str]
    process: str
    new_file: bool = False


def _defines(path: str, source: str, ident: str) -> bool:
    name = ident.split("::")[-1].split("[")[0].split(":")[-1]
    return re.search(rf"^\s*def {re.escape(name)}\(", source, re.M) is not None


def _django_module(path: str) -> str:
    return path.removeprefix("tests/").removesuffix(".py").replace("/", ".")


def _module_tests(tests: list[tuple[str, str, str]], _cls: str) -> str:
    return "".join(f"\n\ndef {name}():\n    assert {left} == {right}\n"
                   for name, left, right in tests)


def _unittest_tests(tests: list[tuple[str, str, str]], cls: str) -> str:
    body = "".join(f"\n    def {name}(self):\n        self.assertEqual({left}, {right})\n"
                   for name, left, right in tests)
    return f"\n\nimport unittest\n\n\nclass {cls}(unittest.TestCase):\n{body}"


RUNNERS: dict[str, Runner] = {
    "pytest": Runner(
        holds=lambda path, source, ident: ident.split("::")[0] == path,
        test_id=lambda path, cls, name: f"{path}::{name}",
        log_keys=lambda path, ident: (ident,),
        render=_module_tests, process="pytest's process", new_file=True),
    "django": Runner(
        holds=lambda path, source, ident: f"({_django_module(path)}." in ident,
        test_id=lambda path, cls, name: f"{name} ({_django_module(path)}.{cls})",
        log_keys=lambda path, ident: (ident, f"{ident[:-1]}.{ident.split(' ')[0]})",
                                      ident.split(" ")[0]),
        render=_unittest_tests, process="Django's test runner's process"),
    "sympy": Runner(
        holds=_defines,
        test_id=lambda path, cls, name: name,
        log_keys=lambda path, ident: (ident, f"{path}:{ident}", f"{path}::{ident}"),
        render=_module_tests, process="sympy's test runner's process"),
}
"""Test runners that get a canary, by name (:func:`runner_of` picks one from the command)."""


def takes_test_files(test_cmd: str) -> bool:
    """True when the words after ``test_cmd`` reach pytest as file arguments: pytest itself, or
    tox ending in ``--`` (sphinx: its tox.ini passes ``{posargs}`` to pytest)."""
    words = test_cmd.split()
    return runs_pytest(test_cmd) or (words[:1] == ["tox"] and words[-1] == "--")


def runner_of(test_cmd: str) -> str | None:
    """The :data:`RUNNERS` entry for ``test_cmd``: ``pytest`` (:func:`takes_test_files`),
    ``django`` (``.../runtests.py``), ``sympy`` (``bin/test``), else None (no canary)."""
    words = test_cmd.split()
    if takes_test_files(test_cmd):
        return "pytest"
    if any(w.endswith("runtests.py") for w in words[:2]):
        return "django"
    if "bin/test" in words:
        return "sympy"
    return None


def canary_candidates(test_cmd: str, test_patch: str) -> list[str]:
    """The test patch's files the canary may be appended to, in the patch's order (the harness
    reads them from the sandbox for :func:`plant_canary`): its Python files but ``conftest.py``;
    none for a runner without a canary."""
    if runner_of(test_cmd) is None:
        return []
    paths = re.findall(r"^diff --git a/.* b/(.*)$", test_patch, re.M)
    return [p for p in dict.fromkeys(paths)
            if p.endswith(".py") and PurePosixPath(p).name != "conftest.py"]


def plant_canary(test_cmd: str, test_files: list[str], fail_to_pass: list[str],
                 sources: dict[str, bytes], rng: random.Random | None = None,
                 taken: Sequence[str] = ()) -> Canary | None:
    """A new canary for a run of ``test_cmd``, or None when the runner gets none.

    The canary is appended to the file in ``sources`` that holds the first FAIL_TO_PASS test
    (whose id shows its file), else to the first one named like a test. With no such source,
    a pytest run gets a new file (three words: ``test_<w>_<w>_<w>.py``) beside its first test
    file, placed at a random position among ``test_files``; the caller checks that no such
    file exists.

    Args:
        test_cmd: the spec's test command (without the files).
        test_files: the command's file arguments (the test patch's directives, in order).
        fail_to_pass: the instance's FAIL_TO_PASS ids.
        sources: the test patch's files as the sandbox holds them after the test patch
            (:func:`canary_candidates`); files over :data:`MAX_SOURCE_BYTES` are not used.
        rng: the randomness of names, values and order; by default the OS's (the agent must not
            predict them).
        taken: more test ids (PASS_TO_PASS) the canary's names must not collide with.
    """
    name = runner_of(test_cmd)
    if name is None:
        return None
    runner = RUNNERS[name]
    rng = rng or secrets.SystemRandom()
    usable = {p: s for p, s in sources.items()
              if len(s) <= MAX_SOURCE_BYTES and p.endswith(".py")}
    path = _target(runner, usable, fail_to_pass)
    position: int | None = None
    if path is None:
        python = [f for f in test_files if f.endswith(".py")]
        if not runner.new_file or not python:
            return None
        folder = PurePosixPath(([f for f in python if _looks_like_test(f)] or python)[0]).parent
        words = _word_pool([*fail_to_pass, *taken], "")
        path = str(folder / f"test_{'_'.join(rng.sample(words, 3))}.py")
        position = rng.randrange(len(test_files) + 1)
    original = usable.get(path) if position is None else None
    text = (original or b"").decode("utf-8", "replace")
    known = " ".join([*fail_to_pass, *taken])
    used = set(re.findall(r"\w+", text)) | set(re.findall(r"\w+", known))
    words = _word_pool([*fail_to_pass, *taken], text)
    tests = [(_fresh_name(words, used, rng), passes) for passes in
             [False] * N_MUST_FAIL + [True] * N_MUST_PASS]
    rng.shuffle(tests)
    cls = _fresh_name(words, used, rng, camel=True)
    code = runner.render([(n, *_equality(passes, rng)) for n, passes in tests], cls)
    ids = {n: runner.test_id(path, cls, n) for n, _ in tests}
    return Canary(runner=name, path=path, original=original, code=code,
                  must_fail=tuple(ids[n] for n, passes in tests if not passes),
                  must_pass=tuple(ids[n] for n, passes in tests if passes), position=position)


def canary_error(canary: Canary, found: Occurrences, junit: JunitReports | None) -> str | None:
    """Why the run's results cannot be trusted, or None when every canary test read exactly as
    planted (must-fail FAILED, must-pass PASSED) in the log and, when given, the JUnit report.

    Args:
        canary: what was planted.
        found: every status the log reported per test id
            (:func:`gymfleet.envs.swe.logparse.parse_occurrences`).
        junit: pytest's JUnit report of the run, None when the command wrote none.

    Returns:
        One line: the first canary test that read otherwise, and where (its id is left out: it
        names nothing the report's readers know).
    """
    process = RUNNERS[canary.runner].process
    sources: list[tuple[str, dict[str, list[str]]]] = [("the log", _log_view(canary, found))]
    if junit is not None:
        sources.append(("the JUnit report", _junit_view(canary, junit)))
    for ident in canary.ids:
        want = "FAILED" if ident in canary.must_fail else "PASSED"
        role = "must fail" if want == "FAILED" else "must pass"
        for where, view in sources:
            statuses = view.get(ident)
            if not statuses:
                return (f"the grader's canary test that {role} has no result in {where}: the "
                        "session stopped before running it (a collection error, an early exit) "
                        f"or its results were rewritten in {process}, so no result counts")
            if set(statuses) != {want}:
                return (f"test outcomes were rewritten in {process} (the grader's canary "
                        f"test that {role} read "
                        f"{'/'.join(sorted(set(statuses)))} in {where})")
    return None


def without_canary(canary: Canary | None, found: Occurrences,
                   junit: JunitReports | None) -> tuple[Occurrences, JunitReports | None]:
    """The log's and the JUnit report's results without the canary's tests (what is graded)."""
    if canary is None:
        return found, junit
    keys = {k for i in canary.ids for k in canary.log_keys(i)}
    junit_keys = {junit_key(i) for i in canary.ids}
    kept = {k: v for k, v in found.items() if k not in keys}
    return kept, None if junit is None else {k: v for k, v in junit.items() if k not in junit_keys}


def restore_command(canary: Canary, repo_dir: str) -> str:
    """Shell that removes a new canary file (an appended one is put back by writing
    ``canary.original``) and the bytecode of the canary's file from ``repo_dir``."""
    path = PurePosixPath(repo_dir) / canary.path
    cached = path.parent / "__pycache__" / f"{path.stem}."
    new = f"{shlex.quote(str(path))} " if canary.original is None else ""
    return f"rm -f {new}{shlex.quote(str(cached))}*"


def _target(runner: Runner, sources: dict[str, bytes], fail_to_pass: list[str]) -> str | None:
    """The source file holding the first FAIL_TO_PASS test that names or defines its file (a
    Django id can be a docstring's first line), else the first file named like a test."""
    for ident in fail_to_pass:
        for path, data in sources.items():
            if runner.holds(path, data.decode("utf-8", "replace"), ident):
                return path
    return next((p for p in sources if _looks_like_test(p)), None)


def _looks_like_test(path: str) -> bool:
    name = PurePosixPath(path).name
    return name.startswith("test_") or name.endswith("_test.py") or name == "tests.py"


def _word_pool(ids: list[str], source: str) -> list[str]:
    """Words of the run's test names and the file's test functions, plus :data:`WORDS`."""
    names = re.findall(r"\btest_(\w+)", " ".join(ids) + "\n" + source)
    own = {w for n in names for w in n.lower().split("_") if w.isalpha() and 3 <= len(w) <= 12}
    return sorted(own | set(WORDS))


def _fresh_name(words: list[str], used: set[str], rng: random.Random,
                camel: bool = False) -> str:
    """``test_<w>_<w>[_<w>]`` (``<W><W>Tests`` when ``camel``) not in ``used`` (then added)."""
    while True:
        picked = rng.sample(words, rng.choice((2, 3)))
        name = ("".join(w.capitalize() for w in picked) + "Tests" if camel
                else "test_" + "_".join(picked))
        if name not in used:
            used.add(name)
            return name


def _equality(passes: bool, rng: random.Random) -> tuple[str, str]:
    """``(left, right)`` Python expressions, equal exactly when ``passes``, on random values."""
    kind = rng.randrange(3)
    if kind == 0:
        a, b = rng.randrange(10**3, 10**9), rng.randrange(10**3, 10**9)
        return f"{a} + {b}", str(a + b if passes else a + b + rng.randrange(1, 10**3))
    if kind == 1:
        values = rng.sample(range(10**6), 3)
        wrong = sorted(values, reverse=True)
        return f"sorted({values!r})", repr(sorted(values) if passes else wrong)
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randrange(4, 12)))
    return f"len({word!r})", str(len(word) + (0 if passes else rng.randrange(1, 4)))


def _log_view(canary: Canary, found: Occurrences) -> dict[str, list[str]]:
    view = {i: [s for k in canary.log_keys(i) for s in found.get(k, [])] for i in canary.ids}
    return {i: statuses for i, statuses in view.items() if statuses}


def _junit_view(canary: Canary, junit: JunitReports) -> dict[str, list[str]]:
    return {i: junit[junit_key(i)] for i in canary.ids if junit_key(i) in junit}
