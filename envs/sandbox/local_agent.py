"""The agent process inside a local sandbox: runs the commands and file copies asked on stdin.

Stdlib only: the local backend copies this file into the sandbox's control folder and runs it
with the host's ``python3``. Protocol: one JSON request per line on stdin, one JSON reply per
line on stdout, matched by ``id``; each request runs in its own thread. Command output goes to
files in the control folder (never to a pipe), so that a daemon a command leaves behind cannot
hang the call. Closing stdin ends the agent (and, under bubblewrap, the whole sandbox).

Usage: ``python3 local_agent.py CONFIG_JSON [CGROUP_PROCS_FD]`` where CONFIG_JSON has ``ctl``
(control folder), ``nproc`` (RLIMIT_NPROC of commands, 0 for none; an agent sharing their user keeps
``NPROC_RESERVE`` more so that it can still answer while a fork bomb fills the sandbox),
``data_bytes`` (RLIMIT_DATA, 0 for none), ``own_pid_ns``
(True when every process but pid 1 and the agent belongs to the sandbox), ``clear_dirs``
(folders emptied by ``reset`` besides the workdir), ``uid`` (None, or the host uid that
commands and file copies run as, the agent keeping only the capabilities to switch to it, to
kill its processes and to give it ``chown`` (folders made for it)). CGROUP_PROCS_FD, when given, is
an inherited descriptor of the sandbox's ``cgroup.procs``: the agent joins that memory cgroup
before it serves any request (so every command and file copy is charged there), and closes it.
Before and after each command the agent kills every process the commands left when the sandbox
is at its process limit.
"""

from __future__ import annotations

import _thread
import os
import sys


def _join_cgroup(fd: int, done: _thread.LockType, errors: list[OSError]) -> None:
    try:
        os.write(fd, b"0")  # "0": the writing process, with all its threads
        os.close(fd)
    except OSError as exc:
        errors.append(exc)
    done.release()


# Joining a memory cgroup waits ~12 ms in the kernel (measured here, v1): started here,
# in a thread, it overlaps the imports below instead of adding to the sandbox's start.
_JOINED = _thread.allocate_lock()
_JOIN_ERRORS: list[OSError] = []
if __name__ == "__main__" and len(sys.argv) > 2:  # run as the agent, not imported by the host
    _JOINED.acquire()
    _thread.start_new_thread(_join_cgroup, (int(sys.argv[2]), _JOINED, _JOIN_ERRORS))

import json  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

KILL_ROUNDS = 500
NPROC_RESERVE = 16
RELIEVE_MARGIN = 8
"""Processes short of the limit at which a sandbox counts as full (see ``Agent.relieve``)."""
FILE_TIMEOUT_S = 600
TRIM_EVERY_S = 0.5
TRIM_SLACK_BYTES = 32 << 20


def main() -> None:
    config = json.loads(sys.argv[1])
    with _JOINED:  # in the sandbox's cgroup before anything runs
        if _JOIN_ERRORS:
            sys.exit(f"cannot join the sandbox's memory cgroup: {_JOIN_ERRORS[0]}")
    agent = Agent(config)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            threading.Thread(target=agent.handle, args=(request,), daemon=True).start()
        except RuntimeError as exc:  # no thread left (the sandbox's process limit is reached)
            agent.reply(request, {"error": f"agent cannot start a thread: {exc}"})
    agent.kill_others()


class Agent:
    """Serves requests; remembers the sessions it started so that it can kill them."""

    def __init__(self, config: dict) -> None:
        uid = config.get("uid")
        # commands and file copies run as the sandbox's user; the agent itself stays out of
        # their reach (they cannot signal it nor write its control folder)
        self.as_user: dict = {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
        self.ctl = config["ctl"]
        self.own_pid_ns = bool(config.get("own_pid_ns"))
        self.clear_dirs = list(config.get("clear_dirs", []))
        self.sessions: set[int] = set()
        self.running: dict[str, int] = {}
        """exec request id -> pid (= session id) of its bash."""
        self.write_lock = threading.Lock()
        self.nproc = int(config.get("nproc", 0))
        # As root (a separate user for commands) the agent is exempt from RLIMIT_NPROC, so its
        # own limit is just what children inherit. Sharing the commands' user, it keeps a reserve
        # and lowers the limit in each child (preexec_fn, a slower fork).
        self.limit_in_child = bool(self.nproc) and uid is None
        if self.nproc:
            limit = self.nproc + (NPROC_RESERVE if self.limit_in_child else 0)
            resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
        if uid is not None:
            for path in config.get("chown", []):  # its tmpfs workdir, made by bubblewrap as root
                os.chown(path, int(uid), int(uid))
        data_bytes = int(config.get("data_bytes", 0))
        if data_bytes:
            resource.setrlimit(resource.RLIMIT_DATA, (data_bytes, data_bytes))

    def handle(self, request: dict) -> None:
        try:
            reply = getattr(self, "op_" + request["op"])(request)
        except Exception as exc:  # every failure goes back to the host as an error reply
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        self.reply(request, reply)

    def reply(self, request: dict, reply: dict) -> None:
        reply["id"] = request.get("id")
        data = (json.dumps(reply) + "\n").encode()
        with self.write_lock:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

    def op_ping(self, request: dict) -> dict:
        return {"pid": os.getpid()}

    def op_exec(self, request: dict) -> dict:
        rid = request["id"]
        started = time.monotonic()
        note = self.relieve()
        with open(os.path.join(self.ctl, f"{rid}.out"), "wb") as out, \
                open(os.path.join(self.ctl, f"{rid}.err"), "wb") as err:
            proc = subprocess.Popen(
                ["bash", "-c", request["cmd"]], stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                cwd=request["cwd"], env=request["env"], start_new_session=True,
                preexec_fn=self.limit_child if self.limit_in_child else None, **self.as_user,
            )
            self.sessions.add(proc.pid)
            self.running[rid] = proc.pid
            trimmers = [Trimmer(f.fileno(), request.get("keep_bytes", 1 << 20)) for f in (out, err)]
            timed_out = not wait_exit(proc, request["timeout_s"], trimmers)
        if timed_out:
            kill_where(lambda pid, sid: sid == proc.pid)
            proc.wait()
        self.running.pop(rid, None)
        note = note or self.relieve()
        return {"exit_code": proc.returncode, "timed_out": timed_out,
                "duration_s": time.monotonic() - started, **({"note": note} if note else {})}

    def relieve(self) -> str:
        """Kills every process the commands left when the sandbox is (nearly) at its process
        limit: a fork bomb's leftovers would make every later command fail to fork. Under the
        limit, daemons the commands started live on. Returns a note for the agent, or ""."""
        if not (self.own_pid_ns and self.nproc):
            return ""
        me = os.getpid()
        alive = sum(1 for p in scan_processes() if p.pid not in (1, me))
        if alive < self.nproc - RELIEVE_MARGIN:
            return ""
        self.kill_others()
        return (f"[gymfleet: the sandbox was at its process limit ({alive} of {self.nproc}): "
                "every process earlier commands left running was killed]")

    def op_cancel(self, request: dict) -> dict:
        """Kills the process tree of the exec request ``target`` (its caller gave up)."""
        session = self.running.get(request["target"])
        if session is not None:
            kill_where(lambda pid, sid: sid == session)
        return {}

    def op_stop(self, request: dict) -> dict:
        """Kills every process the commands left (before a verifier runs) and says which were
        alive (their command lines, read by this root agent) and how many outlived the kill."""
        me = os.getpid()
        mine = (lambda pid, sid: pid not in (1, me)) if self.own_pid_ns else \
            (lambda pid, sid, s=set(self.sessions): sid in s and pid != me)
        alive = [p.pid for p in scan_processes() if p.state != "Z" and mine(p.pid, p.sid)]
        killed = [cmdline(pid) for pid in alive]
        self.kill_others()
        left = [p.pid for p in scan_processes() if p.state != "Z" and mine(p.pid, p.sid)]
        return {"killed": [c for c in killed if c is not None], "left": len(left)}

    def limit_child(self) -> None:
        """Runs in the forked child before exec: commands get the plain process limit."""
        resource.setrlimit(resource.RLIMIT_NPROC, (self.nproc, self.nproc))

    def op_put(self, request: dict) -> dict:
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" -- "$1"'
        with open(request["src"], "rb") as src:
            self.run_as_user([script, request["path"], f"{request['mode']:o}"], stdin=src)
        return {}

    def op_get(self, request: dict) -> dict:
        script = 'test -f "$1" || { echo "no regular file at $1" >&2; exit 2; }; exec cat -- "$1"'
        with open(request["dst"], "wb") as dst:
            self.run_as_user([script, request["path"]], stdout=dst)
        return {}

    def op_reset(self, request: dict) -> dict:
        self.kill_others()
        script = 'for d in "$@"; do cd -- "$d" 2>/dev/null && rm -rf --one-file-system -- * .[!.]* ..?*; done; true'
        self.run_as_user([script, request["workdir"], *self.clear_dirs])
        return {}

    def run_as_user(self, args: list, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL) -> None:
        """Runs ``bash -c args[0] _ args[1:]`` as the sandbox's user.

        Raises:
            OSError: it failed; the message is its stderr.
        """
        done = subprocess.run(
            ["bash", "-c", args[0], "gymfleet", *args[1:]], stdin=stdin, stdout=stdout,
            stderr=subprocess.PIPE, cwd="/", env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            timeout=FILE_TIMEOUT_S, **self.as_user)
        if done.returncode != 0:
            raise OSError(done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}")

    def kill_others(self) -> None:
        """Kills every process of the sandbox except pid 1 and the agent itself."""
        me = os.getpid()
        if self.own_pid_ns:
            kill_where(lambda pid, sid: pid not in (1, me))
        else:
            sessions = set(self.sessions)
            kill_where(lambda pid, sid: sid in sessions and pid != me)
        self.sessions.clear()


def wait_exit(proc: subprocess.Popen, timeout_s: float, trimmers: list) -> bool:
    """Waits for ``proc`` to exit, at most ``timeout_s``; True when it did. Trims the output
    files every ``TRIM_EVERY_S`` meanwhile.

    A pidfd wakes up the moment the process exits (``Popen.wait(timeout)`` polls with sleeps
    of up to 50 ms, which would add to every command's latency).
    """
    deadline = time.monotonic() + timeout_s
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # old kernel or Python: poll
        pidfd = None
    try:
        while True:
            slice_s = min(deadline - time.monotonic(), TRIM_EVERY_S)
            if slice_s <= 0:
                return False
            if pidfd is None:
                try:
                    proc.wait(timeout=slice_s)
                    return True
                except subprocess.TimeoutExpired:
                    pass
            elif select.select([pidfd], [], [], slice_s)[0]:
                proc.wait()
                return True
            for trimmer in trimmers:
                trimmer.trim()
    finally:
        if pidfd is not None:
            os.close(pidfd)


class Trimmer:
    """Keeps an output file's disk use bounded while a command writes gigabytes to it.

    Frees (punches a hole in) the middle of the file, past the head the host keeps, once more
    than ``TRIM_SLACK_BYTES`` piled up there. The file keeps its size (the host reports it) and
    reads back the same head and tail.
    """

    def __init__(self, fd: int, keep_bytes: int) -> None:
        self.fd = fd
        self.keep_bytes = keep_bytes
        self.punched_to = -(-(keep_bytes // 2) // 4096) * 4096

    def trim(self) -> None:
        end = (os.fstat(self.fd).st_size - self.keep_bytes) // 4096 * 4096
        if end - self.punched_to < TRIM_SLACK_BYTES:
            return
        if punch_hole(self.fd, self.punched_to, end - self.punched_to):
            self.punched_to = end


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """fallocate(PUNCH_HOLE | KEEP_SIZE); False when the file system cannot."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        return libc.fallocate(fd, 3, offset, length) == 0
    except (OSError, AttributeError):
        return False


def kill_where(match) -> None:
    """SIGKILLs the processes ``match(pid, session_id)`` selects until none is left, then waits
    (briefly) until pid 1 has reaped them, so that no zombie of theirs shows in ``ps``.

    Several rounds, because a process may fork between the scan and the kill (fork bombs).
    """
    me = os.getpid()
    for _ in range(KILL_ROUNDS):
        victims = [p.pid for p in scan_processes() if p.state != "Z" and match(p.pid, p.sid)]
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and any(
            p.state == "Z" and p.ppid != me and match(p.pid, p.sid) for p in scan_processes()):
        time.sleep(0.01)


def cmdline(pid: int):
    """The command line of ``pid``, arguments joined by spaces; None when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


class Proc:
    """One /proc entry: pid, state letter, parent pid, session id."""

    __slots__ = ("pid", "state", "ppid", "sid")

    def __init__(self, pid: int, fields: list) -> None:
        self.pid = pid
        self.state = fields[0].decode()
        self.ppid = int(fields[1])
        self.sid = int(fields[3])


def scan_processes() -> list:
    """Every process /proc shows (zombies included)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                found.append(Proc(int(name), f.read().rsplit(b")", 1)[1].split()))
        except (OSError, IndexError, ValueError):
            continue
    return found


if __name__ == "__main__":
    main()
