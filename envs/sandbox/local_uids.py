"""Host uids lent to local sandboxes, one per live sandbox, through lock files.

Linux counts ``RLIMIT_NPROC`` per user, so a sandbox whose processes run under a uid no one
else uses gets a process limit of its own (a fork bomb stops there, not at the host's limit).
A uid is lent while its lock file is held (``flock``); the lock dies with the process holding
it, so a crashed owner never leaks one.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from gymfleet.envs.errors import SandboxStartError


class UidLease:
    """One uid, held until :meth:`release`."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd: int | None = fd

    def release(self) -> None:
        """Gives the uid back. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def lease_uid(lock_dir: Path, first_uid: int, n_uids: int) -> UidLease:
    """Lends the lowest free uid of ``[first_uid, first_uid + n_uids)``.

    Raises:
        SandboxStartError: every uid of the range is lent (raise ``n_uids`` or close sandboxes).
    """
    lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for uid in range(first_uid, first_uid + n_uids):
        fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidLease(uid, fd)
    raise SandboxStartError(
        f"all {n_uids} sandbox uids from {first_uid} are in use; close sandboxes or raise "
        "LocalBackendConfig.n_uids"
    )
