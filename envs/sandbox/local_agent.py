"""The agent process inside a local sandbox: runs the commands and file copies asked on stdin.

Stdlib only: the local backend copies this file into the sandbox's control folder and runs it
with the host's ``python3``. Protocol: one JSON request per line on stdin, one JSON reply per
line on stdout, matched by ``id``; each request runs in its own thread. Command output goes to
files in the control folder (never to a pipe), so that a daemon a command leaves behind cannot
hang the call. Closing stdin ends the agent (and, under bubblewrap, the whole sandbox).

Usage: ``python3 local_agent.py CONFIG_JSON`` where CONFIG_JSON has ``ctl`` (control folder),
``nproc`` (RLIMIT_NPROC of commands, 0 for none; the agent keeps
``NPROC_RESERVE`` more so that it can still answer while a fork bomb fills the sandbox), ``data_bytes`` (RLIMIT_DATA, 0 for none), ``own_pid_ns``
(True when every process but pid 1 and the agent belongs to the sandbox), ``clear_dirs``
(folders emptied by ``reset`` besides the workdir), ``uid`` (None, or the host uid
the agent switches to before anything else).
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import threading
import time

KILL_ROUNDS = 500
NPROC_RESERVE = 16


def main() -> None:
    config = json.loads(sys.argv[1])
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
        if config.get("uid") is not None:  # leave root for the uid lent to this sandbox
            os.setgroups([])
            os.setgid(config["uid"])
            os.setuid(config["uid"])
        self.ctl = config["ctl"]
        self.own_pid_ns = bool(config.get("own_pid_ns"))
        self.clear_dirs = list(config.get("clear_dirs", []))
        self.sessions: set[int] = set()
        self.write_lock = threading.Lock()
        self.nproc = int(config.get("nproc", 0))
        if self.nproc:
            limit = self.nproc + NPROC_RESERVE
            resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
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
        with open(os.path.join(self.ctl, f"{rid}.out"), "wb") as out, \
                open(os.path.join(self.ctl, f"{rid}.err"), "wb") as err:
            proc = subprocess.Popen(
                ["bash", "-c", request["cmd"]], stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                cwd=request["cwd"], env=request["env"], start_new_session=True,
                preexec_fn=self.limit_child if self.nproc else None,
            )
        self.sessions.add(proc.pid)
        timed_out = not wait_exit(proc, request["timeout_s"])
        if timed_out:
            kill_where(lambda pid, sid: sid == proc.pid)
            proc.wait()
        return {"exit_code": proc.returncode, "timed_out": timed_out,
                "duration_s": time.monotonic() - started}

    def limit_child(self) -> None:
        """Runs in the forked child before exec: commands get the plain process limit."""
        resource.setrlimit(resource.RLIMIT_NPROC, (self.nproc, self.nproc))

    def op_put(self, request: dict) -> dict:
        path = request["path"]
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        shutil.copyfile(request["src"], path)
        os.chmod(path, request["mode"])
        return {}

    def op_get(self, request: dict) -> dict:
        path = request["path"]
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no regular file at {path}")
        shutil.copyfile(path, request["dst"])
        return {}

    def op_reset(self, request: dict) -> dict:
        self.kill_others()
        for folder in [request["workdir"], *self.clear_dirs]:
            empty_folder(folder)
        return {}

    def kill_others(self) -> None:
        """Kills every process of the sandbox except pid 1 and the agent itself."""
        me = os.getpid()
        if self.own_pid_ns:
            kill_where(lambda pid, sid: pid not in (1, me))
        else:
            sessions = set(self.sessions)
            kill_where(lambda pid, sid: sid in sessions and pid != me)
        self.sessions.clear()


def wait_exit(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Waits for ``proc`` to exit, at most ``timeout_s``; True when it did.

    A pidfd wakes up the moment the process exits (``Popen.wait(timeout)`` polls with sleeps
    of up to 50 ms, which would add to every command's latency).
    """
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # old kernel or Python: fall back to polling
        try:
            proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        ready, _, _ = select.select([pidfd], [], [], max(timeout_s, 0))
    finally:
        os.close(pidfd)
    if ready:
        proc.wait()
    return bool(ready)


def kill_where(match) -> None:
    """SIGKILLs the live processes ``match(pid, session_id)`` selects until none is left.

    Several rounds, because a process may fork between the scan and the kill (fork bombs).
    """
    for _ in range(KILL_ROUNDS):
        victims = [pid for pid, sid in live_processes() if match(pid, sid)]
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)


def live_processes() -> list[tuple[int, int]]:
    """(pid, session id) of every process /proc shows that is not a zombie."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in (b"Z", b"X"):
            found.append((int(name), int(fields[3])))
    return found


def empty_folder(folder: str) -> None:
    """Removes everything inside ``folder``, keeping the folder."""
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


if __name__ == "__main__":
    main()
