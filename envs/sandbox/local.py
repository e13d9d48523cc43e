"""The local sandbox backend: one bubblewrap process per sandbox, running the host's own tools.

Each sandbox is a single long-lived ``bwrap`` process whose root is a fresh tmpfs holding
read-only binds of the host's system folders (``/usr``, ``/etc``, ``/opt``...), a private
``/tmp``, private ``/dev`` and ``/proc``, and a writable host folder bound at ``spec.workdir``.
It has its own user, pid, ipc, uts (and, unless ``spec.network``, network) namespaces and dies
with the Python process that started it (``--die-with-parent``). Inside runs
:mod:`~gymfleet.envs.sandbox.local_agent`, which executes commands in their own sessions, so
daemons a command starts live on until the sandbox closes.

Limits: when gymfleet runs as root, bubblewrap runs as an unprivileged host uid
(``sandbox_uid``, default nobody) and the agent sets ``RLIMIT_NPROC`` to ``spec.pids_limit``
inside the sandbox's own user namespace, so a fork bomb stops there without touching the host or
other sandboxes. ``spec.memory_mb`` becomes ``RLIMIT_DATA`` per process (no cgroups here: it is
not a limit on the sandbox's total). ``spec.cpus`` and ``spec.image`` are ignored.

Without a working bubblewrap, and only when allowed (``GYMFLEET_ALLOW_UNISOLATED=1`` or
``LocalBackendConfig(allow_unisolated=True)``), the agent runs as a plain subprocess in a temp
folder: ``isolated`` is False, a WARNING is logged, and paths outside ``spec.workdir`` are refused.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.local_sandbox import LocalSandbox, Launch
from gymfleet.envs.sandbox.local_state import default_state_dir, read_records, reap

log = logging.getLogger(__name__)

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
"""Host folders (or symlinks) visible read-only inside every sandbox."""
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CTL_MOUNT = "/.gymfleet"
"""Where the sandbox sees its control folder (agent script, output files, file transfers)."""


class LocalBackendConfig(BaseModel):
    """Settings of the local backend."""

    state_dir: Path | None = None
    """Folder of sandbox records for the reaper; None: $GYMFLEET_HOME/sandboxes or
    ~/.cache/gymfleet/sandboxes."""
    tmp_dir: str | None = None
    """Where the sandboxes' host folders go; None: the system temp folder."""
    bwrap: str = "bwrap"
    """The bubblewrap binary, a name on PATH or a path."""
    python: str | None = None
    """The python3 that runs the agent inside the sandbox; None: the first of /usr/bin/python3,
    /usr/local/bin/python3 (or this interpreter when unisolated)."""
    sandbox_uid: int = 65534
    """Host uid the sandboxes run as when gymfleet runs as root (they see themselves as root)."""
    sandbox_gid: int = 65534
    """Host gid, as ``sandbox_uid``."""
    ro_binds: list[str] = []
    """Extra host folders shown read-only at the same path (must be readable by sandbox_uid)."""
    allow_unisolated: bool | None = None
    """Allow the plain-subprocess fallback when bubblewrap does not work; None: read env
    GYMFLEET_ALLOW_UNISOLATED (1/true/yes)."""

    def unisolated_allowed(self) -> bool:
        """True when the unisolated fallback may be used."""
        if self.allow_unisolated is not None:
            return self.allow_unisolated
        return os.environ.get("GYMFLEET_ALLOW_UNISOLATED", "").lower() in {"1", "true", "yes"}


class LocalBackend:
    """Makes :class:`LocalSandbox` es; sweeps sandboxes left by dead processes when created.

    Args:
        config: settings; defaults when None.

    Attributes:
        swept_at_start: how many orphaned or expired sandboxes the start-up sweep removed.
    """

    name = "local"

    def __init__(self, config: LocalBackendConfig | None = None) -> None:
        self.config = config or LocalBackendConfig()
        self.state_dir = self.config.state_dir or default_state_dir()
        self._bwrap_ok: bool | None = None
        self.swept_at_start = self.sweep()

    def available(self) -> bool:
        """True when bubblewrap works here, or the unisolated fallback is allowed."""
        return self.bwrap_works() or self.config.unisolated_allowed()

    def bwrap_works(self) -> bool:
        """True when bubblewrap can make a sandbox here (probed once per backend)."""
        if self._bwrap_ok is None:
            self._bwrap_ok = self._probe_bwrap()
        return self._bwrap_ok

    def create(self, spec: SandboxSpec, labels: SandboxLabels | None = None) -> LocalSandbox:
        """A new, not yet started sandbox (bubblewrap, else the fallback if allowed)."""
        labels = (labels or SandboxLabels()).with_expiry(spec.ttl_s)
        return LocalSandbox(spec, labels, self._launch())

    async def gc(self, *, run_id: str | None = None, expired_only: bool = True) -> int:
        """Removes sandboxes that expired or whose owner process is gone (all when
        ``expired_only`` is False), of ``run_id`` only when given. Returns how many."""
        return await asyncio.to_thread(self.sweep, run_id=run_id, expired_only=expired_only)

    def sweep(self, *, run_id: str | None = None, expired_only: bool = True) -> int:
        """The blocking body of :meth:`gc`."""
        removed = 0
        for record in read_records(self.state_dir):
            if run_id is not None and record.run_id != run_id:
                continue
            if expired_only and record.owner_alive() and not record.expired():
                continue
            reap(self.state_dir, record)
            removed += 1
        return removed

    def _launch(self) -> Launch:
        isolated = self.bwrap_works()
        as_root = os.geteuid() == 0
        return Launch(
            isolated=isolated,
            allowed=isolated or self.config.unisolated_allowed(),
            state_dir=self.state_dir,
            tmp_dir=self.config.tmp_dir,
            python=self._python(isolated),
            bwrap_prefix=self._bwrap_prefix() if isolated else [],
            uid=self.config.sandbox_uid if as_root and isolated else None,
            gid=self.config.sandbox_gid if as_root and isolated else None,
            path_env=SANDBOX_PATH if isolated else os.environ.get("PATH", SANDBOX_PATH),
            ctl_mount=CTL_MOUNT,
        )

    def _python(self, isolated: bool) -> str:
        if self.config.python:
            return self.config.python
        if not isolated:
            return sys.executable
        for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
            if os.access(candidate, os.X_OK):
                return candidate
        return "python3"

    def _bwrap_prefix(self) -> list[str]:
        """bwrap's options that do not depend on the spec: namespaces and system folders."""
        args = [shutil.which(self.config.bwrap) or self.config.bwrap, "--unshare-user",
                "--uid", "0", "--gid", "0", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                "--hostname", "gymfleet", "--die-with-parent", "--new-session"]
        for folder in SYSTEM_DIRS:
            if os.path.islink(folder):
                args += ["--symlink", os.readlink(folder), folder]
            elif os.path.isdir(folder):
                args += ["--ro-bind", folder, folder]
        for folder in self.config.ro_binds:
            args += ["--ro-bind", folder, folder]
        return args + ["--dev", "/dev", "--proc", "/proc", "--dir", "/root", "--dir", "/var/tmp"]

    def _probe_bwrap(self) -> bool:
        if shutil.which(self.config.bwrap) is None:
            log.info("bubblewrap (%s) not found on PATH", self.config.bwrap)
            return False
        as_root = os.geteuid() == 0
        try:
            done = subprocess.run(
                [*self._bwrap_prefix(), "--unshare-net", "--", self._python(True), "-c", "pass"],
                capture_output=True, timeout=30,
                user=self.config.sandbox_uid if as_root else None,
                group=self.config.sandbox_gid if as_root else None,
                extra_groups=[] if as_root else None,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("bubblewrap does not work here: %s", exc)
            return False
        if done.returncode != 0:
            log.warning("bubblewrap does not work here: %s", done.stderr.decode(errors="replace"))
        return done.returncode == 0
