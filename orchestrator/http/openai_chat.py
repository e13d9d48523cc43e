"""The OpenAI Chat Completions dialect: ``POST <base>/chat/completions``, JSON or SSE chunks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gymfleet.orchestrator.http.body import arguments_json, field, sampling, text_of
from gymfleet.orchestrator.http.calls import CallRequest, CallResult, Tool, ToolCall, WireMessage
from gymfleet.orchestrator.http.errors import BadRequestError, WireError

PATH = "/v1/chat/completions"
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def parse(body: dict[str, Any], cap: int) -> CallRequest:
    """The neutral call of a Chat Completions body.

    Raises:
        BadRequestError: the body is not a valid request (the message names the field).
    """
    raw = field(body, "messages", list, required=True)
    if not raw:
        raise BadRequestError("'messages' is empty")
    messages = [_message(m, i) for i, m in enumerate(raw)]
    tools = [_tool(t, i) for i, t in enumerate(field(body, "tools", list, []))]
    return CallRequest(messages, tools, sampling(body, ("max_completion_tokens", "max_tokens"), "stop", cap),
                       bool(field(body, "stream", bool, False)), str(field(body, "model", str, "gymfleet")))


def _message(m: Any, i: int) -> WireMessage:
    where = f"messages[{i}]"
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise BadRequestError(f"{where}: a message needs a role among {sorted(ROLES)}")
    calls = tuple(_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(m.get("tool_calls") or []))
    return WireMessage(ROLES[m["role"]], text_of(m.get("content"), where), calls, str(m.get("tool_call_id") or ""))


def _call(c: Any, where: str) -> ToolCall:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise BadRequestError(f"{where}: a tool call needs function.name")
    return ToolCall(str(c.get("id", "")), fn["name"], arguments_json(fn.get("arguments", "{}"), where))


def _tool(t: Any, i: int) -> Tool:
    fn = t.get("function") if isinstance(t, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise BadRequestError(f"tools[{i}]: a tool needs type 'function' and function.name")
    return Tool(fn["name"], str(fn.get("description", "")), fn.get("parameters") or {})


def _calls_json(calls: list[ToolCall]) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]


def response(result: CallResult, call: CallRequest) -> dict[str, Any]:
    """The ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": result.content or (None if result.tool_calls else "")}
    if result.tool_calls:
        message["tool_calls"] = _calls_json(result.tool_calls)
    return {"id": result.id, "object": "chat.completion", "created": result.created, "model": call.model,
            "choices": [{"index": 0, "message": message, "finish_reason": result.finish_reason, "logprobs": None}],
            "usage": _usage(result)}


def events(result: CallResult, call: CallRequest) -> Iterator[str]:
    """The ``chat.completion.chunk`` SSE stream, ending with ``data: [DONE]``."""
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        data = {"id": result.id, "object": "chat.completion.chunk", "created": result.created, "model": call.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra}
        return f"data: {json.dumps(data)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    if result.content:
        yield chunk({"content": result.content})
    for n, c in enumerate(result.tool_calls):
        yield chunk({"tool_calls": [{"index": n, "id": c.id, "type": "function",
                                     "function": {"name": c.name, "arguments": c.arguments}}]})
    yield chunk({}, result.finish_reason, usage=_usage(result))
    yield "data: [DONE]\n\n"


def _usage(result: CallResult) -> dict[str, int]:
    return {"prompt_tokens": result.n_prompt_tokens, "completion_tokens": result.n_completion_tokens,
            "total_tokens": result.n_prompt_tokens + result.n_completion_tokens}


ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 409: "conflict_error",
               413: "invalid_request_error", 502: "server_error", 504: "timeout"}


def error_body(exc: WireError) -> dict[str, Any]:
    """OpenAI's error shape ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": str(exc), "type": ERROR_TYPES.get(exc.status, "server_error"),
                      "param": None, "code": None}}
