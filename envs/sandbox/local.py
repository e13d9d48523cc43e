"""The local sandbox backend: one bubblewrap process per sandbox, running the host's own tools.

Each sandbox is a single long-lived ``bwrap`` process whose root is a fresh tmpfs holding
read-only binds of the host's system folders (``/usr``, ``/etc``, ``/opt``...) and of the Python
install running gymfleet, a private ``/tmp``, ``/dev`` and ``/proc``, and a writable host folder
bound at ``spec.workdir``. It has its own pid, ipc, uts (and, unless ``spec.network``, network)
namespaces and dies with the Python process that started it (``--die-with-parent``). Inside
runs :mod:`~gymfleet.envs.sandbox.local_agent`, which executes commands in their own sessions,
so daemons a command starts live on until the sandbox closes.

Users and limits: when gymfleet runs as root, bubblewrap runs as root with every capability
dropped but setuid, setgid and kill, and the agent runs commands and file copies as a host uid
lent to this sandbox alone (:mod:`~gymfleet.envs.sandbox.local_uids`, user ``sandbox`` inside),
which therefore cannot signal the agent nor write its control folder; as another user,
bubblewrap makes a user namespace (the sandbox sees itself as root). Either way the agent sets
``RLIMIT_NPROC`` to ``spec.pids_limit`` for a user no other sandbox shares, so a fork bomb stops
there without touching the host or other sandboxes. ``spec.memory_mb`` becomes ``RLIMIT_DATA``
per process and the size of /tmp (no cgroups here: it does not bound the sandbox's total).
``spec.cpus`` and ``spec.image`` are ignored.

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
import tempfile
from pathlib import Path

from gymfleet.core.strict import StrictModel
from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.local_sandbox import Launch, LocalSandbox
from gymfleet.envs.sandbox.local_state import default_state_dir, read_records, reap

log = logging.getLogger(__name__)

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
"""Host folders (or symlinks) visible read-only inside every sandbox."""
TMPFS_DIRS = ("/tmp",)
"""Folders each sandbox gets a private tmpfs on."""
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CTL_MOUNT = "/.gymfleet"
"""Where the sandbox sees its control folder (agent script, output files, file transfers)."""


class LocalBackendConfig(StrictModel):
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
    first_uid: int = 200_000
    """First host uid (and gid) lent to sandboxes when gymfleet runs as root; pick a range no
    host user has."""
    n_uids: int = 50_000
    """How many uids from ``first_uid`` may be lent: the most sandboxes alive at once."""
    uid_lock_dir: Path | None = None
    """Lock files of lent uids, shared by every gymfleet process of the host; None:
    <system temp>/gymfleet-uids."""
    ro_binds: list[str] = []
    """Extra host paths shown read-only at the same path inside."""
    host_python: bool = True
    """Show the Python running gymfleet (its install ``sys.base_prefix`` and its virtual env
    ``sys.prefix``) read-only at the same paths and put ``sys.prefix/bin`` first on PATH, so that
    ``python3`` inside is the host's, with its packages (pytest...)."""
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
        path_env = os.environ.get("PATH", SANDBOX_PATH)
        if isolated:
            path_env = ":".join([*self._python_bins(), SANDBOX_PATH])
        lend_uids = isolated and os.geteuid() == 0
        return Launch(
            isolated=isolated,
            allowed=isolated or self.config.unisolated_allowed(),
            state_dir=self.state_dir,
            tmp_dir=self.config.tmp_dir,
            python=self._python(isolated),
            bwrap_prefix=self._bwrap_prefix() if isolated else [],
            tmpfs_binds=self._tmpfs_binds() if isolated else [],
            uid_range=(self.config.first_uid, self.config.n_uids) if lend_uids else None,
            uid_lock_dir=self._uid_lock_dir(),
            path_env=path_env,
            ctl_mount=CTL_MOUNT,
        )

    def _uid_lock_dir(self) -> Path:
        return self.config.uid_lock_dir or Path(tempfile.gettempdir()) / "gymfleet-uids"

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
        """bwrap's options that do not depend on the spec: namespaces and host folders."""
        if os.geteuid() == 0:
            users = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                     "--cap-add", "CAP_KILL"]
        else:
            users = ["--unshare-user", "--uid", "0", "--gid", "0"]
        args = [shutil.which(self.config.bwrap) or self.config.bwrap, *users,
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "gymfleet",
                "--die-with-parent", "--new-session"]
        for folder in SYSTEM_DIRS:
            if os.path.islink(folder):
                args += ["--symlink", os.readlink(folder), folder]
            elif os.path.isdir(folder):
                args += ["--ro-bind", folder, folder]
        args += ["--dev", "/dev", "--proc", "/proc", "--perms", "01777", "--dir", "/root",
                 "--perms", "01777", "--dir", "/var/tmp"]
        made = {"/", "/root", "/var", "/var/tmp"}
        return args + _ro_bind_args([p for p in self._ro_binds() if not _under(p, TMPFS_DIRS)], made)

    def _tmpfs_binds(self) -> list[str]:
        """Read-only binds of host folders under /tmp (a checkout or virtual env there): they
        must come after the sandbox's own tmpfs on /tmp, or it would hide them."""
        return _ro_bind_args([p for p in self._ro_binds() if _under(p, TMPFS_DIRS)], {"/", "/tmp"})

    def _ro_binds(self) -> list[str]:
        binds = [os.path.abspath(path) for path in self.config.ro_binds]
        if self.config.host_python:
            for prefix in dict.fromkeys([sys.base_prefix, sys.prefix]):
                if not _under(prefix, SYSTEM_DIRS):
                    binds.append(prefix)
        return binds

    def _python_bins(self) -> list[str]:
        return [os.path.join(sys.prefix, "bin")] if self.config.host_python else []

    def _probe_bwrap(self) -> bool:
        if shutil.which(self.config.bwrap) is None:
            log.info("bubblewrap (%s) not found on PATH", self.config.bwrap)
            return False
        check = "pass"
        if os.geteuid() == 0:  # the agent must be able to switch to a lent uid
            uid = self.config.first_uid
            check = f"import os; os.setgroups([]); os.setgid({uid}); os.setuid({uid})"
        try:
            done = subprocess.run(
                [*self._bwrap_prefix(), "--unshare-net", "--", self._python(True), "-c", check],
                capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("bubblewrap does not work here: %s", exc)
            return False
        if done.returncode != 0:
            log.warning("bubblewrap does not work here: %s", done.stderr.decode(errors="replace"))
        return done.returncode == 0


def _under(path: str, folders: tuple[str, ...]) -> bool:
    real = os.path.realpath(path)
    return any(real == f or real.startswith(f + os.sep) for f in map(os.path.realpath, folders))


def _ro_bind_args(paths: list[str], made: set[str]) -> list[str]:
    """bwrap options binding each host path read-only at the same place, parents created."""
    args: list[str] = []
    for path in paths:
        for parent in reversed(Path(path).parents):
            if str(parent) not in made and not _under(str(parent), SYSTEM_DIRS):
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(str(parent))
        args += ["--ro-bind", path, path]
    return args
