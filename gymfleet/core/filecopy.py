"""Copies files that a manifest names between fsspec filesystems, refusing what a tamperer plants.

A bucket version is untrusted input to whoever copies it (a learner resuming, a replica loading an
adapter): a symlink to ``/etc/shadow`` would put host secrets into a world-readable cache, a name
like ``../x`` would write outside the copy, a 1 GiB sparse file would be written dense. So copies
take only the names their manifest lists, read regular files only (never following a symlink),
and stop at the manifest's size and at a bound.
"""

from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath
from typing import IO, Any

from fsspec.implementations.local import LocalFileSystem

DEFAULT_MAX_FILE_BYTES = 16 << 30
"""Largest file a copy accepts by default (16 GiB: a LoRA of a 70B model with its optimiser state
fits; a planted multi-terabyte sparse file does not)."""
_CHUNK = 1 << 20


def checked_name(name: str) -> str:
    """``name`` when it is a relative POSIX path that stays inside its folder.

    Raises:
        ValueError: empty, absolute, with a ``..`` or empty component, or a backslash.
    """
    parts = PurePosixPath(name).parts
    if not name or name.startswith("/") or "\\" in name or any(p in ("..", ".") for p in parts) \
            or "//" in name:
        raise ValueError(f"manifest name {name!r} leaves its folder: refused")
    return name


def regular_file_size(fs: Any, path: str) -> int:
    """The size in bytes of ``path`` on ``fs``, which must be a regular file, not a symlink.

    Raises:
        ValueError: a symlink, a folder or anything but a regular file.
        OSError: ``path`` is missing or unreadable.
    """
    info = fs.info(path)
    if info.get("islink"):
        raise ValueError(f"{path} is a symbolic link: copies never follow links")
    if info.get("type") != "file":
        raise ValueError(f"{path} is not a regular file ({info.get('type')})")
    return int(info["size"])


def open_no_follow(fs: Any, path: str) -> IO[bytes]:
    """``path`` opened for reading without following a symlink (``O_NOFOLLOW`` on local disks,
    so a link swapped in after :func:`regular_file_size` is refused too).

    Raises:
        ValueError: a local ``path`` that is not a regular file.
        OSError: it cannot be opened (``ELOOP`` for a symlink).
    """
    if not isinstance(fs, LocalFileSystem):
        return fs.open(path, "rb")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{path} is not a regular file")
    return os.fdopen(fd, "rb")


def read_bounded(fs: Any, path: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (no symlink), at most ``max_bytes`` of them.

    Raises:
        ValueError: a symlink or not a regular file, or longer than ``max_bytes``.
        OSError: missing or unreadable.
    """
    if regular_file_size(fs, path) > max_bytes:
        raise ValueError(f"{path} is larger than {max_bytes} bytes: refused")
    with open_no_follow(fs, path) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{path} is larger than {max_bytes} bytes: refused")
    return data


def copy_file(src_fs: Any, src: str, dst_fs: Any, dst: str, *, expected_bytes: int | None = None,
              max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> int:
    """Streams the regular file ``src`` to ``dst`` (written as ``dst.partial``, then renamed).

    Args:
        expected_bytes: the size its manifest gives (None: whatever it has); a file of another
            size is refused before anything is written, one that grows is stopped there.
        max_bytes: the bound on its size whatever the manifest says.

    Returns:
        The number of bytes copied.

    Raises:
        ValueError: a symlink or non-regular file, a size other than ``expected_bytes``, or over
            ``max_bytes``; nothing is left at ``dst``.
        OSError: reading or writing failed.
    """
    size = regular_file_size(src_fs, src)
    limit = size if expected_bytes is None else expected_bytes
    if size != limit:
        raise ValueError(f"{src} has {size} bytes, its manifest says {expected_bytes}")
    if limit > max_bytes:
        raise ValueError(f"{src} has {limit} bytes, over the bound of {max_bytes}: refused")
    tmp, written = f"{dst}.partial", 0
    try:
        with open_no_follow(src_fs, src) as fin, dst_fs.open(tmp, "wb") as fout:
            while chunk := fin.read(_CHUNK):
                written += len(chunk)
                if written > limit:
                    raise ValueError(f"{src} grew past the {limit} bytes it had: refused")
                fout.write(chunk)
        dst_fs.mv(tmp, dst)
    except BaseException:
        if dst_fs.exists(tmp):
            dst_fs.rm(tmp)
        raise
    return written
