"""Lazy package exports (PEP 562): a package names its public attributes and loads each on first use.

Used by ``gymfleet``, ``gymfleet.run`` and ``gymfleet.trainer`` so that importing them stays cheap
(no torch, no database driver) until a name is actually used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a module path) and returns its ``name``.

    Args:
        package: the package's name, for the error message.
        exports: public name -> the module that defines it (absolute, or relative to ``package``
            when it starts with a dot).

    Raises:
        AttributeError: (from the returned function) ``name`` is not exported.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    return __getattr__
