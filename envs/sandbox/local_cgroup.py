"""Memory cgroups of local sandboxes: each sandbox's processes *and* its tmpfs files counted
against ``spec.memory_mb``, and all the sandboxes of a backend against one budget.

A tmpfs page stays charged to the memory cgroup of the process that wrote it, so with the
sandbox's bubblewrap started inside its own cgroup, the files its commands leave in /tmp and the
workdir count against its memory limit, and the sandboxes together against the backend's budget:
many sandboxes filling their tmpfs spaces hit that budget (``No space left``, or the OOM killer
inside the sandboxes), never the host's memory. Layout, under the cgroup this process runs in
(never beside it: the process's own accounting keeps holding everything)::

    <own cgroup>/gymfleet-local-<pid>-<n>/      memory limit: the backend's budget
        <sandbox id>/                           memory limit: spec.memory_mb

Needs root and a writable cgroup file system: cgroup v1's memory hierarchy, or v2 where the
memory controller can be enabled below this process's cgroup. Elsewhere :meth:`available` is
False and the sandboxes' tmpfs spaces are bounded by their size only (logged once).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import time
from pathlib import Path

from gymfleet.envs.sandbox.procs import process_start_ticks

log = logging.getLogger(__name__)

V1_ROOT = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup")
_PREFIX = "gymfleet-local-"
_counter = itertools.count()


class MemoryCgroups:
    """The memory cgroups of one local backend's sandboxes.

    Args:
        budget_bytes: the most memory all its sandboxes may hold together (processes and tmpfs).
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._own, self._v2 = _own_cgroup()
        self._parent: Path | None = None
        self._failed = self._own is None

    def available(self) -> bool:
        """True when sandboxes get a memory cgroup (tried once: creating the backend's own)."""
        if not self._failed and self._parent is None:
            self._parent = self._make_parent()
            self._failed = self._parent is None
            if self._parent is not None:
                atexit.register(self.close)
        return not self._failed

    def close(self) -> None:
        """Removes the backend's cgroup (its sandboxes' are gone by then). Idempotent."""
        parent, self._parent = self._parent, None
        if parent is not None:
            for child in parent.glob("*/"):
                remove(child, wait_s=0)
            remove(parent, wait_s=0)

    def create(self, name: str, limit_bytes: int) -> Path | None:
        """A new cgroup ``name`` limited to ``limit_bytes``; None when cgroups are not available.

        Returns:
            The cgroup's folder; write a pid to its ``cgroup.procs`` to put a process in it.
        """
        if not self.available():
            return None
        assert self._parent is not None
        path = self._parent / name
        try:
            path.mkdir()
            _set_limit(path, limit_bytes, self._v2)
        except OSError as exc:
            log.warning("no memory cgroup for local sandbox %s (%s): its tmpfs files are bounded "
                        "by their size only", name, exc)
            remove(path)
            return None
        return path

    def _make_parent(self) -> Path | None:
        assert self._own is not None
        sweep(self._own)
        path = self._own / f"{_PREFIX}{os.getpid()}-{process_start_ticks(os.getpid())}-{next(_counter)}"
        try:
            if self._v2:
                (self._own / "cgroup.subtree_control").write_text("+memory")
            path.mkdir()
            _set_limit(path, self.budget_bytes, self._v2)
            if self._v2:
                (path / "cgroup.subtree_control").write_text("+memory")
        except OSError as exc:
            log.warning("local sandboxes get no memory cgroup (%s: needs root and a writable cgroup "
                        "file system): their tmpfs spaces are bounded by their size only", exc)
            remove(path)
            return None
        return path


def _own_cgroup() -> tuple[Path | None, bool]:
    """This process's memory cgroup folder and whether it is cgroup v2."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None, False
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") and V1_ROOT.is_dir():
            return V1_ROOT / path.lstrip("/"), False
    for line in lines:
        if line.startswith("0::") and (V2_ROOT / "cgroup.controllers").exists():
            return V2_ROOT / line[3:].lstrip("/"), True
    return None, False


def oom_kills(path: Path) -> int:
    """How many processes the OOM killer took in the cgroup at ``path`` (0 when unknown)."""
    for name in ("memory.oom_control", "memory.events"):  # v1, v2
        try:
            text = (path / name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return 0


def peak_bytes(path: Path) -> int:
    """The most memory the cgroup at ``path`` held at once (0 when unknown)."""
    for name in ("memory.max_usage_in_bytes", "memory.peak"):  # v1, v2
        try:
            return int((path / name).read_text())
        except (OSError, ValueError):
            continue
    return 0


def _set_limit(path: Path, limit_bytes: int, v2: bool) -> None:
    if v2:
        (path / "memory.max").write_text(str(limit_bytes))
        swap = path / "memory.swap.max"
        if swap.exists():
            swap.write_text("0")
        return
    (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
    swap = path / "memory.memsw.limit_in_bytes"
    if swap.exists():  # no swap: tmpfs pages cannot be pushed out of the limit
        swap.write_text(str(limit_bytes))


def remove(path: Path, wait_s: float = 2.0) -> None:
    """Removes a cgroup folder once its processes are gone (waits up to ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                log.warning("could not remove cgroup %s (processes still in it)", path)
                return
            time.sleep(0.02)


def sweep(own: Path) -> int:
    """Removes the cgroups of backends whose process is gone (left by a SIGKILLed owner)."""
    removed = 0
    for parent in own.glob(f"{_PREFIX}*"):
        try:
            pid, ticks = (int(part) for part in parent.name[len(_PREFIX):].split("-")[:2])
        except ValueError:
            continue
        if process_start_ticks(pid) == ticks:
            continue
        for child in parent.iterdir():
            if child.is_dir():
                remove(child, wait_s=0)
        remove(parent, wait_s=0)
        removed += 1
    return removed
