"""What of a model patch is graded: its source changes, without the files that steer the test
run.

SWE-bench resets only the files its test patch touches, so a patch can still add a root
``conftest.py`` whose hooks turn failures into passes, a ``tests/conftest.py`` that replaces the
FAIL_TO_PASS test, a pytest/tox option, or a ``setup.py`` that the eval's re-install runs. A sound
grader grades the fix, not the test run's machinery: the blocks of these files are dropped from
the patch before it is applied (listed as ``dropped_files`` in ``report.json``):

* test files (:func:`gymfleet.envs.swe.patch.is_test_file`: the test patch's files, anything
  under ``test``/``tests``/``testing``, ``test_*.py``, ``*_test.py``, every ``conftest.py``);
* every file a test runner or plugin reads at start-up (:data:`STEERING_NAMES`): ``pytest.ini``,
  ``.pytest.ini``, ``pytest.toml``, ``.pytest.toml`` (pytest 9 reads them before ``setup.cfg``),
  ``tox.ini``, ``setup.cfg``, ``pyproject.toml``, ``setup.py``, ``noxfile.py``, coverage's
  ``.coveragerc`` (pytest-cov loads its plugins), ``.env`` (pytest-dotenv), ``pylintrc``;
* interpreter start-up hooks and bytecode: ``sitecustomize.py``, ``usercustomize.py``,
  ``*.pth``, ``*.pyc``, anything under ``__pycache__`` or ``.pytest_cache``;
* distribution metadata (anything in a ``*.dist-info`` or ``*.egg-info`` folder, and every
  ``entry_points.txt``): on ``sys.path`` (an editable install's ``.pth`` puts the repository
  there) a ``pytest11`` entry point is a plugin pytest loads by itself.

The patch is split with :mod:`gymfleet.envs.swe.diffs` (git's quoted headers, context diffs,
``Index:`` lines: every form git or ``patch`` accept) and only the kept blocks are applied; the
harness then checks that the apply wrote no file those blocks do not name.

No gold patch of SWE-bench Lite touches such a file (SWE-bench's own split puts test files in the
test patch), so gold verdicts do not change; an honest agent's reproduction tests are dropped
too, which the test patch's tests make moot.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from gymfleet.envs.swe.diffs import FileDiff, join, parse_diff
from gymfleet.envs.swe.patch import is_test_file

STEERING_NAMES = frozenset({
    # pytest (pytest 9 reads the dotted and .toml forms before setup.cfg), tox, nox, setuptools
    "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
    "setup.cfg", "pyproject.toml", "setup.py", "noxfile.py",
    # coverage.py (pytest-cov loads its plugins at start-up), pytest-dotenv, pylint's rc files
    # (pylint's own tests read them), interpreter start-up hooks, entry points
    ".coveragerc", ".env", "pylintrc", ".pylintrc", "sitecustomize.py", "usercustomize.py",
    "entry_points.txt",
})
"""File names whose changes are never graded (they configure the test run or the install)."""
STEERING_SUFFIXES = (".pth", ".pyc")
"""File suffixes never graded: start-up hooks, and bytecode a test import could load."""
STEERING_FOLDERS = (".dist-info", ".egg-info", "__pycache__", ".pytest_cache")
"""A file under a folder ending so is never graded (metadata, caches the test run reads)."""


@dataclass(frozen=True)
class GradedPatch:
    """A model patch split into what is graded and what is dropped.

    Attributes:
        patch: the blocks that are applied (empty when every block was dropped).
        dropped: paths whose blocks were dropped, in patch order.
    """

    patch: str
    dropped: tuple[str, ...]
    names: frozenset[str] = frozenset()
    """Every path the kept blocks name (raw and ``-p1``-stripped): all an apply may write."""


def steers_tests(path: str, test_files: set[str]) -> bool:
    """True for a path whose change could steer the test run rather than fix the code."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    return (is_test_file(path, test_files) or name in STEERING_NAMES
            or name.endswith(STEERING_SUFFIXES)
            or any(part.endswith(STEERING_FOLDERS) for part in parts[:-1]))


def graded_patch(model_patch: str, test_files: set[str]) -> GradedPatch:
    """Drops the blocks of :func:`steers_tests` files from ``model_patch``.

    The patch is read with :func:`gymfleet.envs.swe.diffs.parse_diff` (every form git or
    ``patch`` accept); the graded patch is the kept blocks re-joined, so text outside any block
    is never applied, and a block is dropped when any name it carries steers the tests.

    Args:
        model_patch: a diff in any form git or ``patch`` accept.
        test_files: the files the instance's test patch touches.
    """
    kept: list[FileDiff] = []
    dropped: list[str] = []
    for block in parse_diff(model_patch):
        bad = [p for p in block.paths if steers_tests(p, test_files)]
        if bad:
            dropped += [p for p in _shortest(bad) if p not in dropped]
        else:
            kept.append(block)
    return GradedPatch(join(kept), tuple(dropped), frozenset(p for b in kept for p in b.paths))


def _shortest(paths: list[str]) -> list[str]:
    """The names as the repository spells them (``a/x``, ``b/x`` and ``x`` give ``x``)."""
    names = set(paths)
    return [p for p in paths if not any(p == f"{side}/{q}" for q in names for side in "ab")]
