"""Command output capture shared by the sandbox backends: bytes in, head + tail text out.

A stream larger than the limit keeps its first and last ``limit_bytes // 2`` bytes, joined by a
marker line naming the full size, so that an agent sees both how a command started and how it
ended. Bytes are decoded as UTF-8 with replacement (binary output never raises).
"""

from __future__ import annotations

import os
from pathlib import Path

MARKER = "\n[... gymfleet: output truncated: {total} bytes in all, {omitted} bytes omitted ...]\n"


def capture(data: bytes, limit_bytes: int) -> tuple[str, int]:
    """Decodes ``data``, kept as head and tail when longer than ``limit_bytes``.

    Args:
        data: the raw stream.
        limit_bytes: the most bytes of ``data`` kept (half head, half tail); 0 keeps none.

    Returns:
        ``(text, total_bytes)``: the decoded text (with a marker naming the full size when
        truncated) and ``len(data)``.
    """
    total = len(data)
    if total <= limit_bytes:
        return _decode(data), total
    head_n, tail_n = _split(limit_bytes)
    tail = data[total - tail_n :] if tail_n else b""
    return _join(data[:head_n], tail, total), total


def capture_file(path: str | os.PathLike[str], limit_bytes: int) -> tuple[str, int]:
    """Like :func:`capture` on a file's contents, reading only the head and the tail.

    Raises:
        OSError: the file cannot be read.
    """
    with Path(path).open("rb") as f:
        total = os.fstat(f.fileno()).st_size
        if total <= limit_bytes:
            return _decode(f.read()), total
        head_n, tail_n = _split(limit_bytes)
        head = f.read(head_n)
        f.seek(total - tail_n)
        tail = f.read(tail_n) if tail_n else b""
    return _join(head, tail, total), total


def _split(limit_bytes: int) -> tuple[int, int]:
    head_n = max(limit_bytes, 0) // 2
    return head_n, max(limit_bytes, 0) - head_n


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _join(head: bytes, tail: bytes, total: int) -> str:
    omitted = total - len(head) - len(tail)
    return _decode(head) + MARKER.format(total=total, omitted=omitted) + _decode(tail)
