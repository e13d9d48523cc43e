"""A container's own changes to its image, read from its overlay layers on this host.

Docker's ``overlay2`` driver keeps a container's writes in one *upper* directory over the image's
read-only *lower* ones (``GraphDriver.Data``); this module reads both as files, so that nothing
runs in the container and nothing its processes wrote is executed. A deleted path is a
*whiteout* in the upper directory (a character device numbered 0/0); a directory deleted and made
again is *opaque* (xattr ``trusted.overlay.opaque=y``: the image's content under it is hidden).
Host paths are never followed through a symlink the layers hold (lookups go one component at a
time with ``lstat``).
"""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_OPAQUE_XATTR = "trusted.overlay.opaque"


@dataclass(frozen=True)
class LayerEntry:
    """One path the container changed.

    Attributes:
        path: absolute path inside the container.
        host_path: the entry in the upper directory (its final content, unless deleted).
        deleted: the container deleted the path (a whiteout).
        opaque: a directory that replaced the image's (whose old content it hides).
        in_image: the image has this path (modified or deleted, not added).
        is_dir: the path is a directory now.
        image_dir: the image has a directory at this path.
    """

    path: str
    host_path: str
    deleted: bool
    opaque: bool
    in_image: bool
    is_dir: bool = False
    image_dir: bool = False

    @property
    def replaces_image_file(self) -> bool:
        """The image's file here was modified, replaced or deleted (a folder of the image that
        only holds changed entries is not: they are judged one by one)."""
        return self.in_image and not (self.is_dir and self.image_dir and not self.opaque)


def _whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


class Layer:
    """The upper and lower directories of one container, as this host sees them."""

    def __init__(self, upper: Path, lowers: list[Path]) -> None:
        self.upper = upper
        self.lowers = lowers

    @classmethod
    def of(cls, container: Any) -> Layer | None:
        """The layers of ``container`` (a docker SDK ``Container``, attributes reloaded), or None
        when they are not readable here (another storage driver, a remote daemon)."""
        data = (container.attrs.get("GraphDriver") or {}).get("Data") or {}
        upper, lowers = data.get("UpperDir"), [p for p in (data.get("LowerDir") or "").split(":") if p]
        if not upper or not os.path.isdir(upper) or not lowers or not all(os.path.isdir(p) for p in lowers):
            return None
        return cls(Path(upper), [Path(p) for p in lowers])

    def in_image(self, path: str) -> bool:
        """True when the image (the lower layers, topmost first) has ``path``; True as well when a
        lower layer reaches it through a symlinked folder (not followed on the host)."""
        return self._image_stat(path) is not None

    def _image_stat(self, path: str) -> os.stat_result | None:
        """``lstat`` of ``path`` in the image, or None; a symlinked folder on the way gives the
        symlink's own (not followed on the host)."""
        parts = [p for p in path.split("/") if p]
        for lower in self.lowers:
            current = lower
            for i, part in enumerate(parts):
                current = current / part
                try:
                    st = os.lstat(current)
                except OSError:
                    break  # not in this layer: ask the next one down
                if _whiteout(st):
                    return None  # deleted by a layer above the ones left
                if stat.S_ISLNK(st.st_mode) and i < len(parts) - 1:
                    return st
            else:
                return st
        return None

    def entries(self) -> list[LayerEntry]:
        """Every path the container changed, parents before children."""
        found = []
        for root, dirs, files in os.walk(self.upper):
            dirs.sort()
            inside = "/" + os.path.relpath(root, self.upper)
            for name in sorted([*dirs, *files]):
                host = os.path.join(root, name)
                path = posixpath.normpath(posixpath.join(inside, name))
                st = os.lstat(host)
                deleted, is_dir = _whiteout(st), stat.S_ISDIR(st.st_mode)
                image = self._image_stat(path)
                found.append(LayerEntry(path, host, deleted, is_dir and _opaque(host), deleted or image is not None,
                                        is_dir, image is not None and stat.S_ISDIR(image.st_mode)))
        return sorted(found, key=lambda e: e.path.split("/"))


def _opaque(host: str) -> bool:
    try:
        return os.getxattr(host, _OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False
