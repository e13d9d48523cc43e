"""Sealing a Docker sandbox for its verifier: every process the agent left killed, and the
verifier's tools proven to be the image's own.

Killing: the host sends ``SIGUSR2`` to the container's PID 1 (gymfleet's keep-alive,
:data:`~gymfleet.envs.sandbox.docker_exec.KEEPALIVE`), whose handler is bash's builtin
``kill -9 -1``: the kernel delivers it to every other process of the pid namespace in one pass
that no ``fork`` can race, and no file the agent replaced is run for it (the keep-alive's bash
was loaded before the agent started). The host then lists the container's processes with
``docker top`` (the host's ``ps``, not the container's) until only PID 1 (and zombies) remain.

Tools: a root agent can replace ``bash`` or ``python3``, or add a ``sitecustomize``/``.pth``,
anywhere in the container's writable layer. The layer's changes since the sandbox started
(:func:`~gymfleet.envs.sandbox.docker_changes.changed_paths`, read by the host) outside the
workdir, ``/tmp`` and the commands' output folder decide: none, and the verifier runs in this
container; any, and it runs in a fresh container of the same image holding a copy of the
workdir (the tests then see no change the agent made outside its workdir).
"""

from __future__ import annotations

import asyncio
import io
import posixpath
import tarfile
import time
from typing import Any

from docker.models.containers import Container

from gymfleet.envs.errors import SandboxDamagedError
from gymfleet.envs.sandbox.docker_container import DockerHost
from gymfleet.envs.sandbox.docker_errors import docker_errors

KILL_SIGNAL = "SIGUSR2"
"""The signal whose handler in PID 1 kills every other process of the container."""
STOP_WAIT_S = 10.0
"""How long the host waits for the killed processes to be gone before calling it damage."""


def survivors(container: Container, init_host_pid: int) -> list[str]:
    """Command lines of the container's live processes other than its PID 1 (zombies are dead),
    as the host's ``ps`` sees them."""
    top: dict[str, Any] = container.top(ps_args="-o pid,stat,args")
    titles = top.get("Titles") or []
    found = []
    for row in top.get("Processes") or []:
        fields = dict(zip(titles, row))
        if str(fields.get("PID")) != str(init_host_pid) and not str(fields.get("STAT", "")).startswith("Z"):
            found.append(str(fields.get("COMMAND", fields.get("ARGS", ""))))
    return found


async def stop_processes(backend: DockerHost, container: Container) -> list[str]:
    """Kills every process in ``container`` but PID 1 and waits until the host sees none.

    Returns:
        The command lines of the processes that were alive before (the host's view), so that a
        verifier can check what ran without running beside it.

    Raises:
        SandboxDamagedError: processes still alive after :data:`STOP_WAIT_S` seconds.
        SandboxError: Docker failed (the container gone: ``SandboxLostError``).
    """
    with docker_errors("stop the sandbox's processes", container.short_id):
        attrs = await backend.run_blocking(backend.client().api.inspect_container, container.id)
        init_pid = int(attrs.get("State", {}).get("Pid") or 0)
        before = await backend.run_blocking(survivors, container, init_pid)
        deadline = time.monotonic() + STOP_WAIT_S
        left = before
        while left:
            await backend.run_blocking(container.kill, signal=KILL_SIGNAL)
            left = await backend.run_blocking(survivors, container, init_pid)
            if left and time.monotonic() > deadline:
                raise SandboxDamagedError(
                    f"sandbox {container.short_id}: {len(left)} processes outlived SIGKILL for "
                    f"{STOP_WAIT_S:g} s ({left[0][:80]!r}...): it cannot be graded")
            if left:
                await asyncio.sleep(0.05)  # the kernel is still delivering the kill
    return before


def copy_folder(source: Container, target: Container, folder: str) -> None:
    """Copies ``folder`` (absolute) of ``source`` to the same path in ``target``, by archive:
    no process runs in either container. Symlinks are copied as links, never followed.

    Raises:
        SandboxDamagedError: the archive names a path outside the folder.
        docker.errors.APIError: Docker refused a copy.
    """
    folder = posixpath.normpath(folder)
    parent, name = posixpath.split(folder)
    stream, _ = source.get_archive(folder)
    data = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        bad = [m.name for m in tar.getmembers()
               if posixpath.normpath(m.name).split("/")[0] != name or ".." in m.name.split("/")]
    if bad:
        raise SandboxDamagedError(f"the workdir's archive names a path outside it: {bad[0]!r}")
    target.put_archive(parent or "/", data)
