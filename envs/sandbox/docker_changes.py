"""What a container changed in its image's filesystem, so that a pool reuses only clean ones.

A pool resets a sandbox by killing its processes and emptying the workdir and /tmp; a command
run as root may have changed anything else (``/root/.gitconfig``, a binary on PATH, ``/etc``),
which the next rollout would inherit. :func:`changed_paths` lists the paths added, changed or
deleted since the image: from the container's overlay upper layer read on this host (a few
milliseconds), else through the daemon's ``docker diff`` (which walks the same layer, slower).
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Any


def changed_paths(container: Any) -> set[str]:
    """Paths (absolute, inside the container) that differ from the image.

    Args:
        container: a docker SDK ``Container`` (its attributes as last reloaded).
    """
    upper = (container.attrs.get("GraphDriver") or {}).get("Data", {}).get("UpperDir")
    if upper and os.path.isdir(upper):
        return _walk(Path(upper))
    return {entry["Path"] for entry in container.diff() or []}


def _walk(upper: Path) -> set[str]:
    found: set[str] = set()
    for root, dirs, files in os.walk(upper):
        inside = "/" + os.path.relpath(root, upper)
        for name in (*dirs, *files):
            found.add(posixpath.normpath(posixpath.join(inside, name)))
    return found


def outside(paths: set[str], allowed: tuple[str, ...]) -> list[str]:
    """The paths that are not one of ``allowed`` or under one, sorted."""
    return sorted(p for p in paths
                  if not any(p == a or p.startswith(a.rstrip("/") + "/") for a in allowed))
