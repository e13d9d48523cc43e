"""Loads the parts of swebench 4.1.0 gymfleet reuses: spec tables, log parsers and grading.

swebench's package ``__init__`` files import everything eagerly (``swebench/__init__`` pulls
``collect`` and bs4/ghapi, ``swebench/harness/__init__`` pulls docker, modal and the
evaluation runner: about 1.6 s and 1,700 modules). gymfleet needs only pure functions, so it
registers the two package objects without running their ``__init__`` and imports the
submodules it uses (constants, log_parsers, grading, test_spec): about 1.0 s, still including
``datasets`` through ``swebench.harness.utils``. Importing happens on first use, not when
gymfleet is imported.

Why 4.1.0 and not 5.x: 5.x dropped the per-repo/per-version spec tables
(``MAP_REPO_VERSION_TO_SPECS``) and its ``make_test_spec`` needs rows carrying ``image`` /
``eval_script`` / ``log_parser``, so classic rows fail with ``KeyError: 'image'``. 4.1.0 still
has the tables, but its grading has faults that 5.x fixed; :mod:`gymfleet.envs.swe.grading`
wraps them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from functools import cache
from pathlib import Path
from typing import Any

SWEBENCH_VERSION = "4.1.0"


def _register_lazy_packages() -> None:
    """Registers ``swebench`` and ``swebench.harness`` as bare packages (no ``__init__`` run)."""
    if "swebench.harness" in sys.modules:
        return
    spec = importlib.util.find_spec("swebench")
    if spec is None or spec.origin is None:
        raise ImportError(
            f"swebench is not installed: pip install 'swebench=={SWEBENCH_VERSION}'"
        )
    root = Path(spec.origin).parent
    for name, folder in (("swebench", root), ("swebench.harness", root / "harness")):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [str(folder)]
            module.__file__ = str(folder / "__init__.py")
            sys.modules[name] = module


@cache
def module(name: str) -> Any:
    """The swebench submodule ``swebench.<name>`` (e.g. ``"harness.grading"``)."""
    _register_lazy_packages()
    return importlib.import_module(f"swebench.{name}")


def constants() -> Any:
    """``swebench.harness.constants`` (markers, TestStatus, spec tables)."""
    return module("harness.constants")


def grading() -> Any:
    """``swebench.harness.grading``."""
    return module("harness.grading")


def log_parser(name: str) -> Any:
    """The swebench log parser function called ``name`` (e.g. ``"parse_log_pytest"``).

    Raises:
        KeyError: no parser of that name in ``swebench.harness.log_parsers``.
    """
    for lang in ("python", "javascript", "go", "java", "rust", "c", "php", "ruby"):
        parsers = module(f"harness.log_parsers.{lang}")
        fn = getattr(parsers, name, None)
        if callable(fn) and name.startswith("parse_log_"):
            return fn
    raise KeyError(f"swebench {SWEBENCH_VERSION} has no log parser {name!r}")


def parser_for_repo(repo: str) -> Any | None:
    """swebench's parser for a known repo (``MAP_REPO_TO_PARSER``), else None."""
    return module("harness.log_parsers").MAP_REPO_TO_PARSER.get(repo)


def repo_specs(repo: str) -> dict[str, dict[str, Any]] | None:
    """swebench's per-version spec table of ``repo``, else None."""
    return constants().MAP_REPO_VERSION_TO_SPECS.get(repo)


def test_directives(row: dict[str, Any]) -> list[str]:
    """The test files (or Django modules) named by the row's ``test_patch``
    (``swebench.harness.test_spec.python.get_test_directives``)."""
    return list(module("harness.test_spec.python").get_test_directives(row))


def modified_files(patch: str) -> list[str]:
    """Files a unified diff modifies (``swebench.harness.utils.get_modified_files``)."""
    return list(module("harness.utils").get_modified_files(patch))


def new_files(patch: str) -> list[str]:
    """Files a unified diff creates (source ``/dev/null``; swebench's ``get_new_files`` of #539,
    which 4.1.0 lacks)."""
    from unidiff import PatchSet

    return [str(f.path) for f in PatchSet(patch) if f.source_file == "/dev/null"]
