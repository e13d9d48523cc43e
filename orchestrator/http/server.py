"""The HTTP gateway: three dialects per session over one TITO gateway, served on loopback or a unix socket.

Routes, ``<token>`` being a session's unguessable token (``SessionRegistry``)::

    POST /s/<token>/v1/chat/completions   OpenAI Chat Completions   (base URL .../s/<token>/v1)
    POST /s/<token>/v1/responses          OpenAI Responses          (base URL .../s/<token>/v1)
    POST /s/<token>/v1/messages           Anthropic Messages        (base URL .../s/<token>)

Every error is answered in the dialect's own shape with its status (errors.py): a malformed body
400, an unknown token 404, a closed session 409, a body over ``max_body_bytes`` 413, an engine
failure 502, a call past ``call_timeout_s`` 504. A refused request changes no session; a call that
fails after it was accepted is recorded on its session as lost, one whose client disconnects before
the answer as abandoned (``tree.py`` says when each is trained on). The server runs in the orchestrator's event loop (the sessions live there).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gymfleet.core.strict import StrictModel
from gymfleet.orchestrator.http import anthropic_messages, openai_chat, openai_responses
from gymfleet.orchestrator.http.calls import CallRequest, CallResult
from gymfleet.orchestrator.http.errors import BadRequestError, TooLargeError, WireError
from gymfleet.orchestrator.http.tools import canonical, parse_completion, to_template_messages
from gymfleet.orchestrator.http.tree import HarnessSession, SessionRegistry

DIALECTS: dict[str, ModuleType] = {
    "openai-chat": openai_chat,
    "openai-responses": openai_responses,
    "anthropic-messages": anthropic_messages,
}
"""Each dialect module has PATH, ``parse(body, cap)``, ``response``, ``events`` and ``error_body``."""


class HttpGatewayConfig(StrictModel):
    """Settings of the HTTP gateway."""

    host: str = "127.0.0.1"
    """Address to listen on; loopback only by default (the token is the only access control)."""
    port: int = 0
    """TCP port; 0 picks a free one."""
    uds: str | None = None
    """Listen on this unix socket path instead of TCP."""
    max_body_bytes: int = 8 * 1024 * 1024
    """Largest request body accepted, bytes (413 above)."""
    max_new_tokens: int = 1024
    """Cap on a call's ``max_tokens`` (a harness asking for more gets this many)."""
    call_timeout_s: float = 300.0
    """Deadline of one call, seconds (504 after it; the call is lost)."""
    http: Literal["httptools", "h11"] = "httptools"
    """uvicorn's HTTP/1.1 parser: ``httptools`` (C, a dependency) or ``h11`` (pure Python, slower)."""


@dataclass
class _Served:
    session: HarnessSession
    call: CallRequest
    result: CallResult


class HttpGateway:
    """The server: an ASGI app over a :class:`SessionRegistry`, run in the caller's event loop.

    Use as ``async with HttpGateway(registry, config) as server:``; :meth:`base_url` gives a
    session's URL for a dialect.

    Args:
        registry: the sessions (and through it the TITO gateway).
        config: listening address and limits.
    """

    def __init__(self, registry: SessionRegistry, config: HttpGatewayConfig | None = None) -> None:
        self.registry = registry
        self.config = config or HttpGatewayConfig()
        self.app = Starlette(routes=[
            Route("/s/{token}" + module.PATH, self._endpoint(module), methods=["POST"]) for module in DIALECTS.values()
        ])
        self.url = ""
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    def base_url(self, session: HarnessSession, dialect: str = "openai-chat") -> str:
        """The base URL a harness is given: ``.../s/<token>/v1`` for OpenAI, ``.../s/<token>`` for Anthropic."""
        root = f"{self.url}/s/{session.token}"
        return root if dialect == "anthropic-messages" else f"{root}/v1"

    async def __aenter__(self) -> HttpGateway:
        import uvicorn

        class _Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:  # the orchestrator owns the signals
                yield

        cfg = self.config
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP; without it
        # every keep-alive call waits ~40 ms on Nagle and the peer's delayed ACK.
        sock = (socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) if cfg.uds
                else socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP))
        if cfg.uds:
            with contextlib.suppress(FileNotFoundError):
                import os
                os.unlink(cfg.uds)
            sock.bind(cfg.uds)
            self.url = "http://gateway"
        else:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((cfg.host, cfg.port))
            self.url = f"http://{cfg.host}:{sock.getsockname()[1]}"
        # httptools: uvicorn's C HTTP parser (h11, its pure-Python one, cost ~0.3 ms of CPU per call:
        # benchmarks/README.md, harness gateway); no access log (a line per call).
        self._server = _Server(uvicorn.Config(self.app, http=cfg.http, log_level="warning", lifespan="off",
                                              access_log=False, timeout_keep_alive=60, backlog=4096))
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task

    def _endpoint(self, module: ModuleType) -> Any:
        async def endpoint(request: Request) -> Response:
            try:
                served = await self._serve(request, module)
            except WireError as exc:
                return JSONResponse(module.error_body(exc), status_code=exc.status)
            if served.call.stream:
                return StreamingResponse(_iterate(module.events(served.result, served.call)),
                                         media_type="text/event-stream")
            return JSONResponse(module.response(served.result, served.call))
        return endpoint

    async def _serve(self, request: Request, module: ModuleType) -> _Served:
        session = self.registry.get(request.path_params["token"])
        call = module.parse(await _json_body(request, self.config.max_body_bytes), self.config.max_new_tokens)
        messages = to_template_messages(call.messages, call.tools)
        work = asyncio.ensure_future(session.call(messages, call.sampling, lambda text: canonical(text, call.tools),
                                                  self.config.call_timeout_s))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
            session.abandon(f"call {session.counts['calls']}: the client disconnected before the answer")
            raise BadRequestError("client disconnected")
        outcome = work.result()
        content, tool_calls = parse_completion(outcome.text, call.tools)
        finish = "tool_calls" if tool_calls else ("length" if outcome.generation.finish_reason == "length" else "stop")
        return _Served(session, call, CallResult(
            secrets.token_hex(12), content, tool_calls, finish, outcome.generation.n_prompt_tokens,
            len(outcome.generation.token_ids), int(time.time())))


async def _iterate(chunks: Iterator[str]) -> AsyncIterator[str]:
    for chunk in chunks:
        yield chunk


async def _disconnected(request: Request) -> None:
    """Returns when the client goes away (the body was read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _json_body(request: Request, max_bytes: int) -> dict[str, Any]:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise TooLargeError(f"the body is {declared} bytes, over the limit of {max_bytes}")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > max_bytes:
            raise TooLargeError(f"the body is over the limit of {max_bytes} bytes")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequestError(f"the body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequestError("the body must be a JSON object")
    return body
