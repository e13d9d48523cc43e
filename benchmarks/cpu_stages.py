"""Where a real rollout's CPU goes, by stage: the helper of ``real_rollouts.py --stages``.

Process CPU times, not wall time (the machine is shared; CPU seconds of a process are its own):

- **sandbox stages**: every call on a local sandbox (``exec``, ``put_file``, ``get_file``,
  ``stop_processes``, ``reset``) is bracketed by reads of its agent process's
  ``/proc/<pid>/stat`` (own plus reaped children's user+system ticks). A call's commands are
  reaped by the agent before it replies, so the delta is everything that call ran in the sandbox
  (bash, the task's tools, the tests' interpreter). The delta is charged to the stage the call
  ran in, named by wrapping the env's and the pool's methods: ``setup`` (the task's files and
  ``setup.sh``), ``exec`` (the agent's commands, with the persistent shell's state save and
  restore), ``grading`` (stop, copy the tests in, run them, read the result), ``reset`` (the
  pool's reset and health check on return). ``start`` is the whole bubblewrap tree's CPU once the
  agent answered its first ping (bwrap, its pid 1, the agent's interpreter).
- **orchestrator**: this process (``RUSAGE_SELF``), split by thread: the event loop (scheduler,
  rollout, env code, gateway, the sandbox channel) and the others (SQLite store writer,
  ``asyncio.to_thread`` workers). ``--cprofile`` adds a profile of the event loop's functions.
- **other**: the whole process tree minus the above (bwrap trees that closed, Chromium).

Ticks are 10 ms: one call's delta is coarse, the mean over hundreds of rollouts is not (the
cumulative counters telescope, so rounding never accumulates).
"""

from __future__ import annotations

import contextvars
import cProfile
import io
import os
import pstats
import resource
import threading
import time
from collections import defaultdict
from typing import Any

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
STAGES = ("start", "setup", "exec", "grading", "reset", "unstaged")
_stage: contextvars.ContextVar[str] = contextvars.ContextVar("stage", default="unstaged")


def tree_ticks(pid: int) -> int:
    """User+system ticks of ``pid`` and its reaped children, plus its live descendants'."""
    total = 0
    for p in [pid, *descendants(pid)]:
        total += own_ticks(p)
    return total


def own_ticks(pid: int) -> int:
    """utime + stime + cutime + cstime of ``pid`` (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    return sum(int(x) for x in fields[11:15])  # fields 14-17 of proc(5), after pid and comm


def descendants(pid: int) -> list[int]:
    """Live descendants of ``pid`` (``/proc/<pid>/task/*/children``)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = [int(c) for c in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def agent_pid(sandbox: Any) -> int | None:
    """The host pid of a local sandbox's agent: the python running ``local_agent.py`` (bwrap's
    own command lines name it too, so the deepest match)."""
    proc = getattr(sandbox, "_proc", None)
    if proc is None:
        return None
    found = None
    for p in [proc.pid, *descendants(proc.pid)]:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"bwrap" not in argv[0] and any(a.endswith(b"local_agent.py") for a in argv):
            found = p
    return found


class StageMeter:
    """Installs the wrappers (once per process) and sums CPU seconds per stage."""

    def __init__(self) -> None:
        self.sandbox_s: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._agents: dict[int, int | None] = {}
        self.overhead_s = 0.0
        """Event-loop CPU seconds the meter's own /proc reads took (charged to the orchestrator)."""
        self._install()

    def snapshot(self) -> dict[str, Any]:
        """Cumulative figures so far: sandbox seconds per stage and this process's threads."""
        return {"sandbox_s": dict(self.sandbox_s), "calls": dict(self.calls), "threads_s": thread_cpu_s(),
                "self_s": _self_cpu_s(), "overhead_s": self.overhead_s}

    def _agent(self, sandbox: Any) -> int | None:
        key = id(sandbox)
        if self._agents.get(key) is None:
            self._agents[key] = agent_pid(sandbox)
        return self._agents[key]

    def _install(self) -> None:
        from gymfleet.envs.sandbox.local_sandbox import LocalSandbox
        from gymfleet.envs.sandbox.pool import SandboxPool
        from gymfleet.envs.terminal.env import TerminalEnv

        meter = self

        def sandbox_call(fn: Any) -> Any:
            async def wrapped(sandbox: Any, *args: Any, **kwargs: Any) -> Any:
                t0 = time.thread_time()
                pid = meter._agent(sandbox)
                before = own_ticks(pid) if pid else 0
                meter.overhead_s += time.thread_time() - t0
                try:
                    return await fn(sandbox, *args, **kwargs)
                finally:
                    if pid:
                        t0 = time.thread_time()
                        stage = _stage.get()
                        meter.sandbox_s[stage] += (own_ticks(pid) - before) * TICK_S
                        meter.calls[stage] += 1
                        meter.overhead_s += time.thread_time() - t0
            return wrapped

        def staged(name: str, fn: Any) -> Any:
            async def wrapped(*args: Any, **kwargs: Any) -> Any:
                token = _stage.set(name)
                try:
                    return await fn(*args, **kwargs)
                finally:
                    _stage.reset(token)
            return wrapped

        start = LocalSandbox.start

        async def timed_start(sandbox: Any) -> None:
            await start(sandbox)
            proc = getattr(sandbox, "_proc", None)
            if proc is not None:
                meter.sandbox_s["start"] += tree_ticks(proc.pid) * TICK_S
                meter.calls["start"] += 1

        for name in ("exec", "put_file", "get_file", "stop_processes", "reset"):
            setattr(LocalSandbox, name, sandbox_call(getattr(LocalSandbox, name)))
        LocalSandbox.start = timed_start  # type: ignore[method-assign]
        for stage, method in (("setup", "prepare"), ("exec", "command"), ("grading", "grade")):
            setattr(TerminalEnv, method, staged(stage, getattr(TerminalEnv, method)))
        SandboxPool._reset = staged("reset", SandboxPool._reset)  # type: ignore[method-assign]


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds of this process's live threads, by role (event loop, store, workers)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = defaultdict(float)
    for tid in os.listdir("/proc/self/task"):
        name = names.get(int(tid), "other")
        role = ("event_loop" if name == "MainThread" else
                "to_thread_workers" if name.startswith("asyncio_") else
                "store_and_other_threads")
        out[role] += own_ticks_thread(int(tid)) * TICK_S
    return dict(out)


def own_ticks_thread(tid: int) -> int:
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    return int(fields[11]) + int(fields[12])


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def per_rollout(before: dict[str, Any], after: dict[str, Any], tree_cpu_s: float, n: int) -> dict[str, Any]:
    """CPU seconds per rollout by stage between two snapshots, with shares of the whole tree."""
    if not n:
        return {}
    rows: dict[str, float] = {}
    for stage in STAGES:
        rows[f"sandbox_{stage}"] = after["sandbox_s"].get(stage, 0.0) - before["sandbox_s"].get(stage, 0.0)
    threads = {k: after["threads_s"].get(k, 0.0) - before["threads_s"].get(k, 0.0) for k in after["threads_s"]}
    self_s = after["self_s"] - before["self_s"]
    for role, s in threads.items():
        rows[f"orchestrator_{role}"] = s
    rows["orchestrator_exited_threads"] = self_s - sum(threads.values())
    overhead_s = after["overhead_s"] - before["overhead_s"]  # the meter's own reads: not the code's
    rows["orchestrator_event_loop"] = rows.get("orchestrator_event_loop", 0.0) - overhead_s
    rows["meter_overhead"] = overhead_s
    rows["other_processes"] = tree_cpu_s - self_s - sum(v for k, v in rows.items() if k.startswith("sandbox_"))
    total = tree_cpu_s or 1.0
    return {"cpu_s_per_rollout": {k: round(v / n, 5) for k, v in rows.items()},
            "share": {k: round(v / total, 3) for k, v in rows.items()},
            "sandbox_calls_per_rollout": {k: round((after["calls"].get(k, 0) - before["calls"].get(k, 0)) / n, 2)
                                          for k in STAGES}}


class Profile:
    """cProfile of the event loop over a window, timed by the thread's CPU clock (not wall time:
    on a loaded machine wall time charges a function for the moments it was preempted);
    ``top()`` lists the heaviest functions."""

    def __init__(self) -> None:
        self.profile = cProfile.Profile(time.thread_time)

    def __enter__(self) -> Profile:
        self.profile.enable()
        return self

    def __exit__(self, *exc: object) -> None:
        self.profile.disable()

    def top(self, n: int = 25, sort: str = "tottime") -> list[str]:
        out = io.StringIO()
        pstats.Stats(self.profile, stream=out).strip_dirs().sort_stats(sort).print_stats(n)
        return [line.rstrip() for line in out.getvalue().splitlines() if line.strip()][-n - 1:]

    def dump(self, path: Any) -> str:
        """Writes the profile for ``python -m pstats`` (or snakeviz); returns the path."""
        self.profile.dump_stats(str(path))
        return str(path)
