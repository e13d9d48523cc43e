"""Interpreter start-up hooks, before and after the eval's re-install.

The eval script re-runs the spec's install (``pip install -e .``) on the patched repository, and
an install runs the repository's code (``setup.py``, a version file it executes). That code can
write a ``.pth`` line or a ``sitecustomize`` that runs in every later interpreter, the test run's
included, and rewrite its results. The harness snapshots the site directories' hooks before and
after the install (:func:`snapshot_script`, run in the sandbox) and grades the run unresolved
when the install added or changed one (:func:`new_hooks`); what a legitimate editable re-install
rewrites (a path line, setuptools' ``__editable__`` finder import) passes.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath

_SNAPSHOT = r'''
import hashlib, json, os, site, sys
dirs = set(getattr(site, "getsitepackages", lambda: [])())
dirs |= {p for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
out = {}
for d in sorted(dirs):
    if not os.path.isdir(d):
        continue
    for n in os.listdir(d):
        p = os.path.join(d, n)
        if not os.path.isfile(p):
            continue
        if n.endswith(".pth"):
            with open(p, errors="replace") as f:
                out[p] = f.read()
        elif n.endswith(".py"):
            with open(p, "rb") as f:
                out[p] = hashlib.sha256(f.read()).hexdigest()
print(json.dumps(out))
'''
_EDITABLE_FINDER = re.compile(r"^import (__editable___[\w.]+_finder); \1\.install\(\)$")
_CUSTOMIZE = {"sitecustomize.py", "usercustomize.py"}


def snapshot_script() -> str:
    """Python source that prints ``{path: .pth text or .py sha256}`` for the top level of every
    site directory of the interpreter that runs it."""
    return _SNAPSHOT


def parse_snapshot(stdout: str) -> dict[str, str] | None:
    """The snapshot's last JSON line, or None when the script printed none."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            return {str(k): str(v) for k, v in data.items()}
    return None


def new_hooks(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Hooks the install added or changed: a ``.pth`` import line that no ``.pth`` had before
    (setuptools' editable finder line excepted), a new or changed ``sitecustomize.py`` /
    ``usercustomize.py``, or a new or changed top-level module other than an editable finder.

    Returns:
        ``"path: why"`` for each, empty when the install left the hooks alone.
    """
    old_lines = {line.strip() for text in before.values() for line in text.splitlines()}
    finders = [p for p in after if _is_finder(p)]
    gone = [p for p in before if _is_finder(p) and p not in after]
    found: list[str] = []
    for path, value in sorted(after.items()):
        if before.get(path) == value:
            continue
        name = PurePosixPath(path).name
        if name.endswith(".pth"):
            found += [f"{path}: runs {line[:120]!r} at start-up" for line in _imports(value)
                      if line not in old_lines and not _EDITABLE_FINDER.match(line)]
        elif name in _CUSTOMIZE:
            found.append(f"{path}: start-up module written by the install")
        elif not _is_finder(path) or path in before:
            # a re-install writes the same finder bytes under the same name
            found.append(f"{path}: top-level module written by the install")
    if len(finders) > len([p for p in before if _is_finder(p)]) and not gone:
        found.append(f"{', '.join(sorted(set(finders) - set(before)))}: an extra editable finder")
    return found


def _is_finder(path: str) -> bool:
    name = PurePosixPath(path).name
    return name.startswith("__editable___") and name.endswith("_finder.py")


def _imports(pth_text: str) -> list[str]:
    """The lines of a .pth file that Python executes (``import ...``)."""
    return [line.strip() for line in pth_text.splitlines()
            if line.startswith(("import ", "import\t"))]
