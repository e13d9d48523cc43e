"""Where a ``gymfleet serve`` replica listens: inference on TCP, admin on a unix-domain socket.

The admin routes (load, unload an adapter) change what every rollout samples from. A browser
task's page runs on the same host as the replica, and a page can send requests to any TCP port
of the host (the browser env's guard refuses them, but a guard is one bug away from letting one
through). A page cannot open a unix-domain socket at all, so the admin routes listen on one:
the socket file is made mode 0600 (in a folder made 0700 when it is missing), so other users of
the host cannot connect either, and the admin token is still asked for
(:func:`~gymfleet.orchestrator.engines.server.admin_refusal`). The inference port serves no admin
route (404).

Both listeners run in one process and one event loop as two uvicorn servers; SIGINT/SIGTERM stop
both, and the socket file is removed on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn

from gymfleet.orchestrator.engines.errors import ReplicaLaunchError

MAX_SOCKET_PATH = 107
"""Longest unix-socket path Linux accepts (``sun_path`` is 108 bytes with its NUL)."""


def bind_admin_socket(path: Path) -> socket.socket:
    """A listening unix-domain socket at ``path``, mode 0600 from the start.

    A socket file left by a replica that died is replaced; one that a live replica still listens
    on is not. The parent folder is created mode 0700 when missing.

    Raises:
        ReplicaLaunchError: the path is too long, is not a socket, is in use, or cannot be bound.
    """
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ReplicaLaunchError(f"admin socket path {path} is longer than {MAX_SOCKET_PATH} bytes: "
                                 "pass a shorter --admin-socket")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.exists() or path.is_symlink():
            _remove_stale(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the file is 0600 the moment bind() makes it: no window
        try:
            sock.bind(str(path))
        finally:
            os.umask(old_umask)
        sock.listen(128)
    except OSError as exc:
        raise ReplicaLaunchError(f"admin socket {path}: {exc.strerror or exc}: pass --admin-socket "
                                 "with a path in a folder you can write") from exc
    return sock


def _remove_stale(path: Path) -> None:
    if not stat.S_ISSOCK(path.lstat().st_mode):
        raise ReplicaLaunchError(f"admin socket path {path} exists and is not a socket: remove it or pass "
                                 "another --admin-socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            path.unlink(missing_ok=True)  # no one listens: a replica that died left it
            return
    raise ReplicaLaunchError(f"admin socket {path} is in use by another replica: stop it or pass another "
                             "--admin-socket")


def bind_inference_socket(host: str, port: int) -> socket.socket:
    """The inference port's listening TCP socket, bound before the model loads so that a port in
    use is said at once, in one line.

    Raises:
        ReplicaLaunchError: ``host:port`` cannot be bound (in use, not an address of this host).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        raise ReplicaLaunchError(f"cannot listen on {host}:{port}: {exc.strerror or exc}: pass another "
                                 "--port or --host") from exc


class _Listener(uvicorn.Server):
    """A uvicorn server that leaves signal handling to :func:`serve_listeners` (two share a loop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_listeners(inference_app: Any, admin_app: Any, inference_sock: socket.socket,
                          admin_sock: socket.socket, log_level: str = "warning") -> None:
    """Serves ``inference_app`` on ``inference_sock`` (:func:`bind_inference_socket`) and
    ``admin_app`` on ``admin_sock`` (:func:`bind_admin_socket`) until SIGINT/SIGTERM (or until
    either server stops), then stops both and removes the socket file."""
    path = admin_sock.getsockname()
    servers = [_Listener(uvicorn.Config(inference_app, log_level=log_level)),
               _Listener(uvicorn.Config(admin_app, log_level=log_level))]
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for server in servers:
            server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    tasks = [asyncio.create_task(servers[0].serve(sockets=[inference_sock])),
             asyncio.create_task(servers[1].serve(sockets=[admin_sock]))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        stop()  # one stopping (its port taken, say) stops the other
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        admin_sock.close()
        inference_sock.close()
        with contextlib.suppress(OSError):
            if isinstance(path, str) and path:
                os.unlink(path)
