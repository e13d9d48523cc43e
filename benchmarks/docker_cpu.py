"""The CPU a Docker-backed run spends outside this process: the helper of ``real_rollouts.py --backend docker``.

On Docker a sandbox's commands run in containers that the daemons start, so their CPU is not in
this process tree. Over a window it is counted in two parts, beside the orchestrator's own:

- **containers**: each sandbox container's cgroup CPU (v2 ``cpu.stat`` ``usage_usec``, v1
  ``cpuacct.usage``; the layouts tried are :data:`CGROUP_LAYOUTS`). The containers are the ones
  this process started (``DockerSandbox.start`` is wrapped, so no Docker API call is made to find
  them); ``DockerSandbox.close`` is wrapped to read the container just before it is removed, and
  that last reading is kept. A container's delta is its reading at the window's end (or its last)
  minus its reading at the start, 0 for one started inside the window. It holds each
  ``docker exec``'s ``runc init`` from the moment that joins the cgroup: Docker's cost, not the task's.
- **docker_daemon**: ``dockerd`` and ``containerd`` (utime+stime+cutime+cstime, from
  ``/proc/<pid>/stat``: the short-lived ``containerd-shim start`` they reap lands in their cutime),
  and each sandbox's shim (found by its ``-id <container>`` argument) with its reaped children:
  every ``runc`` run by a shim is its child, reaped by it. So are the ``docker exec`` processes
  (the shim is their subreaper), whose CPU is the container's already: a shim's children are
  counted less what its container's cgroup holds that its live processes do not (their own and
  reaped children's CPU), which is what the shim reaped from it. ``runc`` processes seen alive
  are not counted apart: their CPU reaches the shim's cutime once reaped.

``dockerd`` and ``containerd`` serve every client of the daemon: on a shared machine another
user's Docker work in the window lands in ``docker_daemon`` (``other_containers_at_start_and_end``
counts the containers that are not this run's; another user's image builds show in neither). Ticks are 10 ms, cgroup figures nanoseconds or
microseconds; the sums telescope, so the mean over many rollouts is exact.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cpu_stages import TICK_S, own_ticks

CGROUP_LAYOUTS: tuple[tuple[str, str], ...] = (
    ("/sys/fs/cgroup/system.slice/docker-{id}.scope", "cpu.stat"),  # v2, systemd driver
    ("/sys/fs/cgroup/docker/{id}", "cpu.stat"),  # v2, cgroupfs driver
    ("/sys/fs/cgroup/cpuacct/docker/{id}", "cpuacct.usage"),  # v1, cgroupfs driver
    ("/sys/fs/cgroup/cpu,cpuacct/docker/{id}", "cpuacct.usage"),
    ("/sys/fs/cgroup/cpuacct/system.slice/docker-{id}.scope", "cpuacct.usage"),  # v1, systemd driver
    ("/sys/fs/cgroup/cpu,cpuacct/system.slice/docker-{id}.scope", "cpuacct.usage"),
)
"""Where a container's cgroup lies, by cgroup version and Docker's cgroup driver: (folder, file)."""

DAEMONS = ("dockerd", "containerd")
NOTE = ("docker_cpu_s_per_rollout: CPU-s per rollout over the steady window; orchestrator = this process tree "
        "(cpu_s_per_rollout), containers = the sandbox containers' cgroup CPU, docker_daemon = dockerd + containerd "
        "+ the sandboxes' containerd shims with the runc they reaped (dockerd and containerd also serve any other "
        "Docker user of this host), total = their sum")
"""The explanation printed beside the figures."""


def cgroup_cpu_s(filename: str, text: str) -> float:
    """CPU seconds in a cgroup accounting file's text.

    Args:
        filename: ``cpu.stat`` (cgroup v2: the ``usage_usec`` line, microseconds) or
            ``cpuacct.usage`` (v1: one number, nanoseconds).
        text: the file's contents.

    Raises:
        ValueError: ``cpu.stat`` without a ``usage_usec`` line, or a v1 file that is no number.
    """
    if filename != "cpu.stat":
        return int(text) / 1e9
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    raise ValueError(f"no usage_usec line in cpu.stat: {text[:80]!r}")


@dataclass(frozen=True)
class ProcCpu:
    """One daemon process's cumulative CPU seconds."""

    role: str
    """``dockerd``, ``containerd`` or ``shim``."""
    own_s: float
    """utime + stime."""
    children_s: float
    """cutime + cstime: its reaped children's (and their reaped children's)."""


@dataclass(frozen=True)
class ContainerCpu:
    """One container's cumulative CPU seconds."""

    usage_s: float
    """The cgroup's usage: every process that ran in it."""
    live_s: float
    """Its live processes' own and reaped children's CPU: the part the shim has not reaped."""


@dataclass(frozen=True)
class Snapshot:
    """The last reading of every container and daemon process seen so far."""

    containers: dict[str, ContainerCpu] = field(default_factory=dict)
    procs: dict[tuple[int, int], ProcCpu] = field(default_factory=dict)
    """By (pid, start time in ticks), so that a reused pid is another process."""
    meter_s: float = 0.0
    """This process's CPU seconds spent in the meter's reads (charged to the orchestrator)."""
    other_containers: int = 0
    """Containers under the same cgroup parent that this process did not start, at the reading."""
    execs: int = 0
    """``docker exec`` calls made by this process's sandboxes so far."""


def per_rollout(before: Snapshot, after: Snapshot, orchestrator_s: float, n: int) -> dict[str, Any]:
    """CPU seconds per rollout between two snapshots: orchestrator, containers, docker_daemon, total.

    Args:
        before, after: :meth:`DockerCpuMeter.read` at the window's start and end.
        orchestrator_s: this process tree's CPU seconds over the window.
        n: rollouts completed in the window.

    Returns:
        ``docker_cpu_s_per_rollout`` (the split and its total), ``docker_daemon_parts_s_per_rollout``
        the meter's own reads and the ``docker exec`` calls per rollout; empty when ``n`` is 0.
    """
    if not n:
        return {}
    zero_c, zero_p = ContainerCpu(0.0, 0.0), ProcCpu("", 0.0, 0.0)
    d_usage = sum(c.usage_s - before.containers.get(k, zero_c).usage_s for k, c in after.containers.items())
    d_live = sum(c.live_s - before.containers.get(k, zero_c).live_s for k, c in after.containers.items())
    parts = dict.fromkeys((*DAEMONS, "shims", "runc_via_shims"), 0.0)
    for key, p in after.procs.items():
        old = before.procs.get(key, zero_p)
        own, children = p.own_s - old.own_s, p.children_s - old.children_s
        if p.role == "shim":
            parts["shims"] += own
            parts["runc_via_shims"] += children
        else:
            parts[p.role] += own + children
    parts["runc_via_shims"] -= d_usage - d_live  # the docker exec processes the shims reaped: containers' CPU
    split = {"orchestrator": orchestrator_s, "containers": d_usage, "docker_daemon": sum(parts.values())}
    split["total"] = sum(split.values())
    return {"docker_cpu_s_per_rollout": {k: round(v / n, 5) for k, v in split.items()},
            "docker_daemon_parts_s_per_rollout": {k: round(v / n, 5) for k, v in parts.items()},
            "docker_meter_reads_s_per_rollout": round((after.meter_s - before.meter_s) / n, 5),
            "docker_execs_per_rollout": round((after.execs - before.execs) / n, 2),
            "other_containers_at_start_and_end": [before.other_containers, after.other_containers]}


class DockerCpuMeter:
    """Wraps ``DockerSandbox.start`` and ``close`` (once per process) to follow this process's
    containers, and its ``docker exec`` call to count them; :meth:`read` takes a :class:`Snapshot`."""

    def __init__(self) -> None:
        self._files: dict[str, Path] = {}
        self._shims: dict[str, list[tuple[int, int]]] = {}
        self._daemons: list[tuple[int, int]] = []
        self._containers: dict[str, ContainerCpu] = {}
        self._procs: dict[tuple[int, int], ProcCpu] = {}
        self._meter_s = 0.0
        self._execs = 0
        self._lock = threading.Lock()  # execs are counted on the sandboxes' worker threads
        self._install()

    def read(self) -> Snapshot:
        """Reads every container and daemon process followed; one gone keeps its last reading."""
        t0 = time.thread_time()
        for cid in self._files:
            self._read_container(cid)
        for key in self._daemons:
            self._read_proc(key, "")
        parents = {f.parent.parent for f in self._files.values()}
        ours = {f.parent.name for f in self._files.values()}
        others = sum(1 for p in parents for d in p.iterdir() if d.name not in ours and _is_container(d.name))
        self._meter_s += time.thread_time() - t0
        return Snapshot(dict(self._containers), dict(self._procs), self._meter_s, others, self._execs)

    def add(self, container_id: str) -> None:
        """Follows a container just started: finds its cgroup, its shim and the daemons.

        Raises:
            RuntimeError: the container's cgroup is in none of :data:`CGROUP_LAYOUTS`.
        """
        t0 = time.thread_time()
        for folder, name in CGROUP_LAYOUTS:
            path = Path(folder.format(id=container_id)) / name
            if path.exists():
                self._files[container_id] = path
                break
        else:
            raise RuntimeError(f"no cgroup found for container {container_id[:12]} in {CGROUP_LAYOUTS}: find it "
                               f"(`cat /proc/<its pid>/cgroup`) and add its layout to CGROUP_LAYOUTS")
        daemons, shims = [], []
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            comm, start = _comm_and_start(pid)
            if comm in DAEMONS:
                daemons.append((pid, start))
            elif comm.startswith("containerd-shim") and _runs_container(pid, container_id):
                shims.append((pid, start))
        self._daemons, self._shims[container_id] = daemons, shims
        self._meter_s += time.thread_time() - t0

    def _read_container(self, cid: str) -> None:
        path = self._files[cid]
        for key in self._shims.get(cid, []):  # the shim first: whatever it reaps later is still live below
            self._read_proc(key, "shim")
        try:
            usage_s = cgroup_cpu_s(path.name, path.read_text())
            pids = [int(p) for p in (path.parent / "cgroup.procs").read_text().split()]
        except OSError:
            return
        self._containers[cid] = ContainerCpu(usage_s, sum(own_ticks(p) for p in pids) * TICK_S)

    def _read_proc(self, key: tuple[int, int], role: str) -> None:
        try:
            with open(f"/proc/{key[0]}/stat", "rb") as f:
                comm, fields = _split_stat(f.read())
        except OSError:
            return
        if int(fields[19]) != key[1]:  # the pid was reused
            return
        ticks = [int(x) for x in fields[11:15]]
        self._procs[key] = ProcCpu(role or comm, (ticks[0] + ticks[1]) * TICK_S, (ticks[2] + ticks[3]) * TICK_S)

    def _install(self) -> None:
        from gymfleet.envs.sandbox.docker_sandbox import DockerSandbox

        meter, start, close, exec_sync = self, DockerSandbox.start, DockerSandbox.close, DockerSandbox._exec_sync

        async def followed_start(sandbox: Any) -> None:
            await start(sandbox)
            if sandbox.container_id and sandbox.container_id not in meter._files:
                meter.add(sandbox.container_id)

        async def read_then_close(sandbox: Any) -> None:
            cid = sandbox.container_id
            if cid in meter._files:  # its last reading, kept: the cgroup goes with the container
                t0 = time.thread_time()
                meter._read_container(cid)
                meter._meter_s += time.thread_time() - t0
            await close(sandbox)

        def counted_exec(sandbox: Any, *args: Any, **kwargs: Any) -> Any:
            with meter._lock:
                meter._execs += 1
            return exec_sync(sandbox, *args, **kwargs)

        DockerSandbox._exec_sync = counted_exec  # type: ignore[method-assign]
        DockerSandbox.start = followed_start  # type: ignore[method-assign]
        DockerSandbox.close = read_then_close  # type: ignore[method-assign]


def _is_container(name: str) -> bool:
    """A cgroup folder named for a container: its 64-hex id, or ``docker-<id>.scope``."""
    cid = name.removeprefix("docker-").removesuffix(".scope")
    return len(cid) == 64 and all(c in "0123456789abcdef" for c in cid)


def _split_stat(raw: bytes) -> tuple[str, list[bytes]]:
    """``/proc/<pid>/stat`` as (comm, the fields after it: state is 0, utime 11, starttime 19)."""
    head, _, tail = raw.rpartition(b")")
    return head.split(b"(", 1)[1].decode(errors="replace"), tail.split()


def _comm_and_start(pid: int) -> tuple[str, int]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            comm, fields = _split_stat(f.read())
        return comm, int(fields[19])
    except (OSError, IndexError, ValueError):
        return "", 0


def _runs_container(pid: int, container_id: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return any(a == b"-id" and b == container_id.encode() for a, b in zip(argv, argv[1:]))
