"""Docker's failures as the sandbox error tree, and what a missing frame means.

Every SDK and transport error raised while using a sandbox goes through :func:`docker_errors`,
so no ``docker.errors.*`` or ``requests`` exception leaves the backend:

==========================================  =========================================
what Docker said                            raised
==========================================  =========================================
404 "No such container"                     SandboxLostError (removed from outside)
409/500 "is not running" / "is restarting"  SandboxLostError (stopped, or being removed)
other 404 (a path)                          re-raised for the caller (file not found)
any other API error                         SandboxError naming the call
connection refused / reset, socket closed   SandboxUnavailableError (daemon gone)
==========================================  =========================================

:func:`explain_lost_frame` decides, when a command's wrapper printed nothing, whose doing it
was: the container gone, stopped or restarted is the outside's (infrastructure); a container
that runs on since the sandbox started it means the command killed its own wrapper.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import docker.errors
import requests.exceptions

from gymfleet.core.errors import SandboxError
from gymfleet.envs.errors import (
    SandboxDamagedError,
    SandboxLostError,
    SandboxUnavailableError,
)

NOT_RERUN = "the command was not run again"


def container_gone(exc: BaseException) -> bool:
    """True when a Docker error says the container no longer exists."""
    return isinstance(exc, docker.errors.NotFound) and "no such container" in str(exc).lower()


def container_stopped(exc: BaseException) -> bool:
    """True when a Docker error says the container is not running (stopped, restarting, paused).

    Docker 23+ answers 409 Conflict; Docker 20.10 (Debian bookworm's ``docker.io``) answers an
    exec on a stopped container with 500 and the same words.
    """
    text = str(exc).lower()
    return isinstance(exc, docker.errors.APIError) and exc.status_code in (409, 500) and (
        "not running" in text or "restarting" in text or "paused" in text)


@contextlib.contextmanager
def docker_errors(doing: str, short_id: str = "") -> Iterator[None]:
    """Maps what the block raises onto the sandbox error tree (see the module docstring).

    A ``docker.errors.NotFound`` about a path (not the container) is re-raised unchanged for the
    caller, which knows whether a missing path is an error.

    Raises:
        SandboxLostError: the container was removed or stopped from outside.
        SandboxUnavailableError: the daemon stopped answering.
        SandboxError: any other Docker failure.
    """
    what = f"sandbox {short_id}" if short_id else "the sandbox"
    try:
        yield
    except SandboxError:
        raise
    except docker.errors.NotFound as exc:
        if container_gone(exc):
            raise SandboxLostError(
                f"{what} was removed from outside (an operator's `docker rm`, the reaper, or the "
                f"daemon) while trying to {doing}; {NOT_RERUN}") from exc
        raise
    except docker.errors.DockerException as exc:  # before RequestException: APIError is both
        if container_stopped(exc):
            raise SandboxLostError(
                f"{what} was stopped, restarted or removed from outside (`docker kill`/`stop`/"
                f"`restart`/`rm -f`, the reaper, the daemon) while trying to {doing}: {exc}; "
                f"{NOT_RERUN}") from exc
        raise SandboxError(f"Docker failed to {doing} ({what}): {exc}") from exc
    except (requests.exceptions.RequestException, OSError) as exc:
        raise SandboxUnavailableError(
            f"Docker daemon stopped answering while trying to {doing} ({exc}): restart it "
            "(`make services`) or pass --sandbox local") from exc


@dataclass(frozen=True)
class ContainerState:
    """What ``inspect`` says about a sandbox's container."""

    running: bool
    started_at: str
    exit_code: int
    oom_killed: bool

    @classmethod
    def of(cls, attrs: dict[str, Any]) -> ContainerState:
        """From ``inspect_container``'s answer."""
        state = attrs.get("State", {})
        return cls(bool(state.get("Running")), str(state.get("StartedAt", "")),
                   int(state.get("ExitCode") or 0), bool(state.get("OOMKilled")))


def oom_damage(now: ContainerState, short_id: str) -> SandboxDamagedError | None:
    """The policy's damage when the container stopped because its memory limit's OOM killer took
    init (the agent's files in tmpfs stay charged while every process is killed), else None."""
    if not now.running and now.oom_killed:
        return SandboxDamagedError(
            f"sandbox {short_id} ran out of memory until its init was killed (files in /tmp and "
            "the workdir count against the memory limit)")
    return None


def explain_lost_frame(
    now: ContainerState, started_at: str, short_id: str
) -> SandboxLostError | SandboxDamagedError | None:
    """Why a command's wrapper printed no frame; None when the container runs on as the sandbox
    started it (the command killed its own wrapper, ``kill -9 -1``).

    The container's init ignores every signal sent from inside, so a stopped container was
    stopped from outside, unless its memory limit's OOM killer took init: files the agent wrote
    to its tmpfs spaces stay charged while every process is killed, which is the agent's doing.

    Args:
        now: the container's state after the loss.
        started_at: ``StartedAt`` when the sandbox last (re)started it itself.
        short_id: for the message.
    """
    damage = oom_damage(now, short_id)
    if damage is not None:
        return damage
    if not now.running:
        return SandboxLostError(
            f"sandbox {short_id} was stopped from outside mid-command (exit code {now.exit_code}: "
            f"`docker kill`/`stop`/`restart`, the daemon, or the host); {NOT_RERUN}")
    if now.started_at != started_at:
        return SandboxLostError(
            f"sandbox {short_id} was restarted from outside mid-command (every process in it died); "
            f"{NOT_RERUN}")
    return None
