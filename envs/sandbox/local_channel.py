"""The host end of the JSON-lines channel to a local sandbox's agent process.

Works from whichever event loop awaits it (it registers a reader on the running loop only while
replies are pending), so that a sandbox started under one ``asyncio.run`` can be used under the
next. Several requests may be in flight at once; replies are matched by id.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from typing import Any

from gymfleet.core.errors import SandboxError


class AgentChannel:
    """Requests to, and replies from, one agent process started with piped stdin and stdout."""

    def __init__(self, proc: subprocess.Popen[bytes], what: str) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self._proc = proc
        self._what = what
        self._rfd = proc.stdout.fileno()
        os.set_blocking(self._rfd, False)
        self._buffer = b""
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._reader_loop: asyncio.AbstractEventLoop | None = None
        self._write_lock = threading.Lock()
        self._eof = False

    async def request(self, rid: str, op: str, wait_s: float, **fields: Any) -> dict[str, Any]:
        """Sends ``{"id": rid, "op": op, **fields}`` and waits for the reply.

        Raises:
            SandboxError: the agent is gone, or did not answer within ``wait_s`` seconds.
        """
        if self._eof:
            raise SandboxError(f"{self._what}: the sandbox's agent process has exited")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._pending[rid] = future
        try:
            self._ensure_reader(loop)
            self._send({"id": rid, "op": op, **fields})
            async with asyncio.timeout(wait_s):
                return await future
        except TimeoutError:
            raise SandboxError(
                f"{self._what}: the sandbox's agent did not answer {op!r} within {wait_s:.0f} s; "
                "close the sandbox and start a new one"
            ) from None
        finally:
            self._pending.pop(rid, None)
            if not self._pending:
                self._drop_reader()

    def notify(self, op: str, **fields: Any) -> None:
        """Sends a request whose reply nobody waits for; silent when the agent is gone."""
        try:
            self._send({"id": None, "op": op, **fields})
        except SandboxError:
            pass

    def close(self) -> None:
        """Stops listening (the caller closes the process)."""
        self._drop_reader()
        self._fail_pending("the sandbox was closed")

    def _send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        assert self._proc.stdin is not None
        try:
            with self._write_lock:
                self._proc.stdin.write(data)
                self._proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            self._eof = True
            raise SandboxError(f"{self._what}: cannot reach the sandbox's agent ({exc})") from exc

    def _ensure_reader(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._reader_loop is loop:
            return
        self._drop_reader()
        loop.add_reader(self._rfd, self._on_readable)
        self._reader_loop = loop

    def _drop_reader(self) -> None:
        loop, self._reader_loop = self._reader_loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._rfd)

    def _on_readable(self) -> None:
        try:
            data = os.read(self._rfd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._eof = True
            self._drop_reader()
            self._fail_pending("the sandbox's agent process exited (killed, or out of memory?)")
            return
        self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            reply = json.loads(line)
            future = self._pending.get(reply.get("id"))
            if future is not None and not future.done():
                future.set_result(reply)

    def _fail_pending(self, why: str) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(SandboxError(f"{self._what}: {why}"))
