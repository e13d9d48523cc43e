"""``after_import``: run a function once a module is imported, without importing it (a
post-import hook, as ``wrapt.register_post_import_hook`` does, in ~40 lines of stdlib).

``import gymfleet`` uses it to register the envs with Gymnasium only once Gymnasium is imported:
Gymnasium takes ~0.2 s to import, ``import gymfleet`` ~5 ms.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

# Duck-typed finder and loader (sys.meta_path allows it): importlib.abc alone costs ~10x
# `import gymfleet`.


def after_import(module_name: str, target: str) -> None:
    """Calls ``target`` now if ``module_name`` is imported, else right after its module has executed.

    The deferred case is a one-shot finder at the front of ``sys.meta_path``: it finds the module
    with the finders behind it and wraps the loader, which restores the module's own loader once
    it has executed, then calls ``target``. A ``target`` that raises is logged (never breaks the
    import). Idempotent per ``(module_name, target)``.

    Args:
        module_name: a top-level module, e.g. ``"gymnasium"``.
        target: ``"package.module:function"`` (imported only when called; a string so that the
            core names no other package).
    """
    if module_name in sys.modules:
        _call(target)
    elif not any(isinstance(f, _AfterImport) and (f.module_name, f.target) == (module_name, target)
                 for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(module_name, target))


def _call(target: str) -> None:
    module_name, _, function = target.partition(":")
    try:
        getattr(importlib.import_module(module_name), function)()
    except Exception as exc:
        import logging

        logging.getLogger(__name__).warning("%s failed after import: %s", target, exc)


class _AfterImport:
    """Finds ``module_name`` with the finders behind it and wraps its loader; removes itself on use."""

    def __init__(self, module_name: str, target: str) -> None:
        self.module_name, self.target = module_name, target

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != self.module_name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in list(sys.meta_path):
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _CallingLoader(spec.loader, self.target)
                return spec
        return None


class _CallingLoader:
    """Delegates to the module's own loader, then calls the target."""

    def __init__(self, loader: Any, target: str) -> None:
        self.loader, self.target = loader, target

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        module.__loader__ = module.__spec__.loader = self.loader  # its own, as if never wrapped
        _call(self.target)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ... of the real loader
        return getattr(self.loader, name)
