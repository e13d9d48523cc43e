"""What of a model patch is graded: its source changes, without the files that steer the test
run.

SWE-bench resets only the files its test patch touches, so a patch can still add a root
``conftest.py`` whose hooks turn failures into passes, a ``tests/conftest.py`` that replaces the
FAIL_TO_PASS test, a pytest/tox option, or a ``setup.py`` that the eval's re-install runs. A sound
grader grades the fix, not the test run's machinery: the blocks of these files are dropped from
the patch before it is applied (listed as ``dropped_files`` in ``report.json``):

* test files (:func:`gymfleet.envs.swe.patch.is_test_file`: the test patch's files, anything
  under ``test``/``tests``/``testing``, ``test_*.py``, ``*_test.py``, every ``conftest.py``);
* test-run and packaging configuration (:data:`STEERING_NAMES`): ``pytest.ini``,
  ``.pytest.ini``, ``pytest.toml``, ``.pytest.toml`` (pytest 9 reads them before ``setup.cfg``),
  ``tox.ini``, ``setup.cfg``, ``pyproject.toml``, ``setup.py``, ``noxfile.py``;
* interpreter start-up hooks: ``sitecustomize.py``, ``usercustomize.py``, ``*.pth``;
* distribution metadata (anything in a ``*.dist-info`` or ``*.egg-info`` folder, and every
  ``entry_points.txt``): on ``sys.path`` (an editable install's ``.pth`` puts the repository
  there) a ``pytest11`` entry point is a plugin pytest loads by itself.

No gold patch of SWE-bench Lite touches such a file (SWE-bench's own split puts test files in the
test patch), so gold verdicts do not change; an honest agent's reproduction tests are dropped
too, which the test patch's tests make moot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from gymfleet.envs.swe.patch import is_test_file

STEERING_NAMES = frozenset({
    "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg",
    "pyproject.toml", "setup.py", "noxfile.py", "sitecustomize.py", "usercustomize.py", "entry_points.txt",
})
"""File names whose changes are never graded (they configure the test run or the install)."""
_GIT_HEADER = re.compile(r"^diff --git a/(.+?) b/(.+?)$", re.M)
_PLAIN_HEADER = re.compile(r"^--- (?:a/)?(\S+)[^\n]*\n\+\+\+ (?:b/)?(\S+)", re.M)


@dataclass(frozen=True)
class GradedPatch:
    """A model patch split into what is graded and what is dropped.

    Attributes:
        patch: the blocks that are applied (empty when every block was dropped).
        dropped: paths whose blocks were dropped, in patch order.
    """

    patch: str
    dropped: tuple[str, ...]


def steers_tests(path: str, test_files: set[str]) -> bool:
    """True for a path whose change could steer the test run rather than fix the code."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    return (is_test_file(path, test_files) or name in STEERING_NAMES or name.endswith(".pth")
            or any(part.endswith((".dist-info", ".egg-info")) for part in parts[:-1]))


def graded_patch(model_patch: str, test_files: set[str]) -> GradedPatch:
    """Drops the blocks of :func:`steers_tests` files from ``model_patch``.

    Args:
        model_patch: a unified diff (git's ``diff --git`` blocks, or plain ``---``/``+++``).
        test_files: the files the instance's test patch touches.
    """
    blocks = _blocks(model_patch)
    kept: list[str] = []
    dropped: list[str] = []
    for paths, text in blocks:
        bad = [p for p in paths if p != "/dev/null" and steers_tests(p, test_files)]
        if bad:
            dropped += [p for p in bad if p not in dropped]
        else:
            kept.append(text)
    return GradedPatch("".join(kept), tuple(dropped))


def _blocks(patch: str) -> list[tuple[tuple[str, ...], str]]:
    """The per-file blocks of a diff: (paths named by its header, text)."""
    header = _GIT_HEADER if _GIT_HEADER.search(patch) else _PLAIN_HEADER
    starts = [m.start() for m in header.finditer(patch)]
    if not starts:
        return [((), patch)] if patch.strip() else []
    blocks = [((), patch[:starts[0]])] if patch[:starts[0]].strip() else []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(patch)
        text = patch[start:end]
        match = header.match(text)
        assert match is not None
        paths = set(match.groups())
        # a git block's ---/+++ lines, or a rename's targets, may name other paths
        paths |= {p for m in _PLAIN_HEADER.finditer(text) for p in m.groups()}
        paths |= set(re.findall(r"^rename (?:from|to) (.+)$", text, re.M))
        blocks.append((tuple(sorted(paths)), text))
    return blocks
