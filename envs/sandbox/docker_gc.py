"""The Docker reaper: finds the ``gymfleet.*`` containers nobody owns any more and removes them.

A container is stale when its ``gymfleet.expires_at`` label lies in the past, or when its
``gymfleet.host`` label names this host and its owner process is gone (the orchestrator that made
it was SIGKILLed): no process has its ``gymfleet.owner_pid``, or the one that has it started at
another time than ``gymfleet.owner_start`` (the pid was reused). Containers of live owners on
other hosts are left to their owners until they expire.
"""

from __future__ import annotations

import os
import socket
import time

import docker
import docker.errors

from gymfleet.envs.sandbox.base import LABEL_EXPIRES_AT, LABEL_HOST, LABEL_OWNER_PID, LABEL_OWNER_START, LABEL_RUN_ID
from gymfleet.envs.sandbox.procs import same_process


def is_stale(labels: dict[str, str], now_s: float | None = None, host: str | None = None) -> bool:
    """True when a container's labels say it expired or its owner process on this host is gone.

    Args:
        labels: the container's labels.
        now_s: Unix time to judge expiry against (default: now).
        host: this host's name (default: ``socket.gethostname()``).
    """
    expires_at = float(labels.get(LABEL_EXPIRES_AT) or 0)
    if expires_at and expires_at < (time.time() if now_s is None else now_s):
        return True
    if labels.get(LABEL_HOST) != (host or socket.gethostname()):
        return False
    try:
        pid = int(labels.get(LABEL_OWNER_PID, ""))
    except ValueError:
        return False
    try:
        start_ticks = int(labels[LABEL_OWNER_START])
    except (KeyError, ValueError):  # a container from before the label: the pid alone decides
        return not _pid_alive(pid)
    return not same_process(pid, start_ticks)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def reap(client: docker.DockerClient, run_id: str | None = None, expired_only: bool = True) -> int:
    """Removes (killing first) the stale ``gymfleet.*`` containers, or every one when
    ``expired_only`` is False; only those of ``run_id`` when given.

    Returns:
        How many containers this call removed (one removed meanwhile by another reaper is not
        counted).

    Raises:
        docker.errors.DockerException: the daemon failed to list or remove.
    """
    label = f"{LABEL_RUN_ID}={run_id}" if run_id else LABEL_RUN_ID
    removed = 0
    # ignore_removed: a container another reaper (or its owner) removes while we list is gone,
    # not an error.
    for container in client.containers.list(all=True, filters={"label": label}, ignore_removed=True):
        if expired_only and not is_stale(container.labels):
            continue
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # "removal already in progress": another reaper has it
                continue
            raise
        removed += 1
    return removed
