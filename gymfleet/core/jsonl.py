"""Append-only JSONL files that survive a torn last line (a stop on a full disk, a kill mid-write)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO


def repair_torn_tail(path: str | Path) -> int:
    """Cuts a partial last line (no final newline) off a JSONL file, so the next append starts clean.

    A writer stopped mid-line (disk full, SIGKILL) leaves bytes after the last ``\\n``; appending
    to that would glue the next record onto them and make both unreadable. The torn record is
    lost either way; the complete lines before it are kept.

    Args:
        path: the file; a missing or empty file is left alone.

    Returns:
        The number of bytes cut (0 when the file ended on a newline).

    Raises:
        OSError: the file cannot be read or truncated.
    """
    path = Path(path)
    if not path.exists():
        return 0
    with path.open("rb+") as f:
        size = f.seek(0, os.SEEK_END)
        end = size
        while end > 0:  # scan back in blocks for the last newline
            start = max(0, end - 65536)
            f.seek(start)
            block = f.read(end - start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            end = start
        else:
            keep = 0
        if keep < size:
            f.truncate(keep)
        return size - keep


def open_for_append(path: str | Path) -> IO[str]:
    """Opens a JSONL file for appending (folder created), after :func:`repair_torn_tail`.

    Raises:
        OSError: the folder or file cannot be created, read or truncated.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    repair_torn_tail(path)
    return path.open("a", encoding="utf-8")
