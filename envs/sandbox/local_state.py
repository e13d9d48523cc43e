"""The on-disk records of local sandboxes, and the reaper that removes those nobody owns.

Every local sandbox writes ``<state_dir>/<sandbox_id>.json`` (its labels, owner pid, host
folder and bubblewrap pid) before it starts its processes, and deletes it when closed. Every
process of a sandbox carries ``GYMFLEET_SANDBOX_ID=<id>`` in its environment, so that the reaper
finds them through /proc even when the owner died without closing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gymfleet.envs.sandbox.local_cgroup import remove as remove_cgroup
from gymfleet.envs.sandbox.procs import process_start_ticks

MARKER_ENV = "GYMFLEET_SANDBOX_ID"


@dataclass
class SandboxRecord:
    """What the reaper needs to know about one local sandbox."""

    sandbox_id: str
    run_id: str
    rollout_id: str
    expires_at: float
    """Unix time, seconds."""
    owner_pid: int
    owner_start_ticks: int
    """Start time of the owner process (clock ticks since boot), to tell a reused pid apart."""
    host_dir: str
    """Host folder holding the sandbox's workdir and control folder."""
    host: str = ""
    agent_pid: int = 0
    """Host pid of bubblewrap (or of the unisolated agent); 0 before start."""
    agent_start_ticks: int = 0
    cgroup: str = ""
    """The sandbox's memory cgroup folder, or "" when it has none."""

    def owner_alive(self) -> bool:
        """True while the process that created the sandbox runs."""
        return process_start_ticks(self.owner_pid) == self.owner_start_ticks

    def expired(self, now: float | None = None) -> bool:
        """True once ``expires_at`` has passed."""
        return bool(self.expires_at) and (now or time.time()) > self.expires_at


def default_state_dir() -> Path:
    """``$GYMFLEET_HOME/sandboxes``, else ``~/.cache/gymfleet/sandboxes``."""
    home = os.environ.get("GYMFLEET_HOME")
    base = Path(home) if home else Path.home() / ".cache" / "gymfleet"
    return base / "sandboxes"


def write_record(state_dir: Path, record: SandboxRecord) -> None:
    """Writes (or replaces) a record atomically."""
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / f".{record.sandbox_id}.json.tmp"
    tmp.write_text(json.dumps(asdict(record)))
    tmp.replace(state_dir / f"{record.sandbox_id}.json")


def read_records(state_dir: Path) -> list[SandboxRecord]:
    """Every readable record of this host (unreadable files are skipped)."""
    records: list[SandboxRecord] = []
    if not state_dir.is_dir():
        return records
    for path in state_dir.glob("*.json"):
        try:
            record = SandboxRecord(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if record.host in ("", socket.gethostname()):
            records.append(record)
    return records


def remove_record(state_dir: Path, sandbox_id: str) -> None:
    """Deletes a record; missing is fine."""
    (state_dir / f"{sandbox_id}.json").unlink(missing_ok=True)


def reap(state_dir: Path, record: SandboxRecord) -> None:
    """Kills every process of the sandbox, removes its host folder and its record."""
    if record.agent_pid and process_start_ticks(record.agent_pid) == record.agent_start_ticks:
        _kill(record.agent_pid)
    kill_marked(record.sandbox_id)
    if record.cgroup:
        remove_cgroup(Path(record.cgroup))
    shutil.rmtree(record.host_dir, ignore_errors=True)
    remove_record(state_dir, record.sandbox_id)


def kill_marked(sandbox_id: str, rounds: int = 200) -> int:
    """SIGKILLs every process whose environment names ``sandbox_id``; returns how many."""
    killed = 0
    for _ in range(rounds):
        victims = marked_pids(sandbox_id)
        if not victims:
            break
        for pid in victims:
            killed += _kill(pid)
        time.sleep(0.005)
    return killed


def marked_pids(sandbox_id: str) -> list[int]:
    """Pids of the live processes whose environment names ``sandbox_id``."""
    needle = f"\0{MARKER_ENV}={sandbox_id}\0".encode()
    return [pid for pid in _pids() if needle in b"\0" + _environ(pid) and not _zombie(pid)]


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _zombie(pid: int) -> bool:
    return process_start_ticks(pid) == -1


def _kill(pid: int) -> int:
    try:
        os.kill(pid, signal.SIGKILL)
        return 1
    except (ProcessLookupError, PermissionError):
        return 0
