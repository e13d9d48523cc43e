"""The only way out of a CLI agent's sandbox: one session's gateway, on a port inside the sandbox.

The sandbox's container has no network (``network_mode: none``): its network namespace holds only
loopback. :func:`listen_in_netns` opens a listening TCP socket *inside* that namespace from the host
(``setns(2)`` in a short-lived thread; the socket keeps the namespace), and :class:`SessionProxy`
serves it from the orchestrator's event loop: every request to ``http://127.0.0.1:<port>/<path>``
is forwarded to ``<session root>/<path>`` (``.../s/<token>``) and its answer (JSON or server-sent
events) streamed back. So the sandbox never sees the token, cannot name another session (a path
naming one becomes a path under its own session: 404), and no process in the sandbox can reach
anything else: the agent can kill nothing of the proxy, which is on the host.

Needs a local Docker daemon and root (``CAP_SYS_ADMIN`` for ``setns``); anything else is one line
naming the fix.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from dataclasses import dataclass, field

import aiohttp
import docker
from aiohttp import web

from gymfleet.core.errors import SandboxError

CLONE_NEWNET = 0x40000000
HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive",
                         "accept-encoding", "content-encoding"})
MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest request body forwarded (the gateway's own limit is lower and answers 413 itself)."""


def container_pid(container_id: str, client: docker.DockerClient | None = None) -> int:
    """The host pid of the container's first process (whose namespaces the container's are).

    Raises:
        SandboxError: the container is not running.
    """
    state = (client or docker.from_env()).api.inspect_container(container_id)["State"]
    if not state.get("Running") or not state.get("Pid"):
        raise SandboxError(f"container {container_id[:12]} is not running: no proxy can be placed in it")
    return int(state["Pid"])


def listen_in_netns(pid: int, port: int) -> socket.socket:
    """A TCP socket listening on ``127.0.0.1:port`` in the network namespace of process ``pid``.

    Raises:
        SandboxError: the namespace could not be entered (not root, no such process) or the port
            is taken there.
    """
    box: dict[str, object] = {}

    def enter() -> None:  # setns changes only this thread's namespace; the thread then ends
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        except OSError as exc:
            box["error"] = f"cannot open the sandbox's network namespace: {exc}"
            return
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                box["error"] = (f"setns into the sandbox's network namespace failed ({os.strerror(ctypes.get_errno())}):"
                                " CLI agents need the orchestrator to run as root beside a local Docker daemon")
                return
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.bind(("127.0.0.1", port))
            sock.listen(64)
            sock.setblocking(False)
            box["sock"] = sock
        except OSError as exc:
            box["error"] = f"cannot listen on 127.0.0.1:{port} in the sandbox: {exc}"
        finally:
            os.close(fd)

    thread = threading.Thread(target=enter, name="gymfleet-netns")
    thread.start()
    thread.join()
    if "error" in box:
        raise SandboxError(str(box["error"]))
    return box["sock"]  # type: ignore[return-value]


@dataclass
class SessionProxy:
    """Forwards one sandbox's requests to one gateway session. ``async with`` serves it.

    Args:
        sock: the listening socket (:func:`listen_in_netns`).
        root: the session's root URL, ``http://127.0.0.1:PORT/s/<token>``.
        max_calls: model calls forwarded at most; later ones get 429 and are counted as refused.
    """

    sock: socket.socket
    root: str
    max_calls: int = 1_000_000
    calls: int = 0
    """Requests forwarded."""
    answered: int = 0
    """Requests the gateway answered with a success status (a model call whose reply the agent got,
    or could have got: its tool commands may have run in the sandbox)."""
    refused: list[str] = field(default_factory=list)
    """One line per request refused here or answered 4xx by the gateway (path and status)."""
    _runner: web.AppRunner | None = None
    _client: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> SessionProxy:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/{path:.*}", self._forward)
        self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.SockSite(self._runner, self.sock).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._client is not None:
            await self._client.close()
        self.sock.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        if self.calls >= self.max_calls:
            self.refused.append(f"{request.method} {path}: 429 (max_turns={self.max_calls} reached)")
            return web.json_response({"error": {"message": f"the rollout's limit of {self.max_calls} model calls "
                                                f"is reached", "type": "rate_limit_error"}}, status=429)
        self.calls += 1
        try:
            return await self._relay(request, path)
        except aiohttp.ClientError as exc:  # the gateway closed (the run is ending): the agent sees a 502
            self.refused.append(f"{request.method} {path}: 502 (the gateway could not be reached: {exc})")
            return web.json_response({"error": {"message": "the gateway could not be reached",
                                                "type": "server_error"}}, status=502)

    async def _relay(self, request: web.Request, path: str) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        assert self._client is not None
        async with self._client.request(request.method, self.root + path, data=await request.read(),
                                        headers=headers, params=request.query) as upstream:
            if upstream.status >= 400:
                self.refused.append(f"{request.method} {path}: {upstream.status}")
            else:
                self.answered += 1
            response = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS})
            try:
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionResetError:  # the agent went away (stopped, killed): the gateway records the call
                pass
            return response
