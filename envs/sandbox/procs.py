"""Process identity on this host: a pid plus its start time, so that a reused pid is told apart
from the process that once had it (both backends' reapers judge owners by it)."""

from __future__ import annotations

import os


def process_start_ticks(pid: int) -> int:
    """Start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22); -1 when
    there is no such live process (gone, or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return -1
    return -1 if fields[0] in (b"Z", b"X") else int(fields[19])


def same_process(pid: int, start_ticks: int) -> bool:
    """True while the process that had ``pid`` and started at ``start_ticks`` still runs."""
    return start_ticks >= 0 and process_start_ticks(pid) == start_ticks


def my_identity() -> tuple[int, int]:
    """(pid, start ticks) of this process."""
    pid = os.getpid()
    return pid, process_start_ticks(pid)
