"""The Anthropic Messages dialect: ``POST <base>/v1/messages``, JSON or SSE message events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gymfleet.orchestrator.http.body import field, sampling, text_of
from gymfleet.orchestrator.http.calls import CallRequest, CallResult, Tool, ToolCall, WireMessage
from gymfleet.orchestrator.http.errors import BadRequestError, WireError

PATH = "/v1/messages"
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def parse(body: dict[str, Any], cap: int) -> CallRequest:
    """The neutral call of a Messages body (``system``, ``messages`` of blocks, ``tools``).

    Raises:
        BadRequestError: the body is not a valid request (the message names the field).
    """
    field(body, "max_tokens", int, required=True)
    raw = field(body, "messages", list, required=True)
    if not raw:
        raise BadRequestError("'messages' is empty")
    system = text_of(field(body, "system", (str, list), ""), "system")
    messages = [WireMessage("system", system)] if system else []
    for i, m in enumerate(raw):
        messages += _message(m, f"messages[{i}]")
    tools = [_tool(t, i) for i, t in enumerate(field(body, "tools", list, []))]
    return CallRequest(messages, tools, sampling(body, ("max_tokens",), "stop_sequences", cap),
                       bool(field(body, "stream", bool, False)), str(field(body, "model", str, "gymfleet")))


def _message(m: Any, where: str) -> list[WireMessage]:
    if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
        raise BadRequestError(f"{where}: a message needs role 'user', 'assistant' or 'system'")
    content = m.get("content")
    if m["role"] == "system":  # Claude Code 2.1 sends its environment notes as a system turn mid-list
        return [WireMessage("system", text_of(content, where))]
    if isinstance(content, str):
        return [WireMessage(m["role"], content)]
    if not isinstance(content, list):
        raise BadRequestError(f"{where}: content must be a string or a list of blocks")
    texts, calls, results = [], [], []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        at = f"{where}.content[{j}]"
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use" and m["role"] == "assistant" and isinstance(block.get("name"), str):
            calls.append(ToolCall(str(block.get("id", "")), block["name"], json.dumps(block.get("input") or {})))
        elif kind == "tool_result" and m["role"] == "user":
            results.append(WireMessage("tool", text_of(block.get("content"), at), (), str(block.get("tool_use_id", ""))))
        elif kind not in ("thinking", "redacted_thinking"):
            raise BadRequestError(f"{at}: unsupported content block {kind!r}")
    own = [WireMessage(m["role"], "".join(texts), tuple(calls))] if texts or calls else []
    return results + own


def _tool(t: Any, i: int) -> Tool:
    if not isinstance(t, dict) or not isinstance(t.get("name"), str):
        raise BadRequestError(f"tools[{i}]: a tool needs a name")
    return Tool(t["name"], str(t.get("description") or ""), t.get("input_schema") or {})


def _blocks(result: CallResult) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": result.content}] if result.content else []
    return blocks + [{"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)}
                     for c in result.tool_calls]


def _message_object(result: CallResult, call: CallRequest, content: list[dict[str, Any]],
                    stop_reason: str | None) -> dict[str, Any]:
    return {"id": f"msg_{result.id}", "type": "message", "role": "assistant", "model": call.model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": result.n_prompt_tokens, "output_tokens": result.n_completion_tokens}}


def response(result: CallResult, call: CallRequest) -> dict[str, Any]:
    """The ``message`` object."""
    return _message_object(result, call, _blocks(result), STOP_REASONS[result.finish_reason])


def events(result: CallResult, call: CallRequest) -> Iterator[str]:
    """``message_start``, each block's start/delta/stop, ``message_delta``, ``message_stop``."""
    def event(kind: str, **data: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    start = _message_object(result, call, [], None)
    yield event("message_start", message={**start, "usage": {**start["usage"], "output_tokens": 0}})
    for index, block in enumerate(_blocks(result)):
        if block["type"] == "text":
            yield event("content_block_start", index=index, content_block={"type": "text", "text": ""})
            yield event("content_block_delta", index=index, delta={"type": "text_delta", "text": block["text"]})
        else:
            yield event("content_block_start", index=index, content_block={**block, "input": {}})
            yield event("content_block_delta", index=index,
                        delta={"type": "input_json_delta", "partial_json": json.dumps(block["input"])})
        yield event("content_block_stop", index=index)
    yield event("message_delta", delta={"stop_reason": STOP_REASONS[result.finish_reason], "stop_sequence": None},
                usage={"output_tokens": result.n_completion_tokens})
    yield event("message_stop")


ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 409: "invalid_request_error",
               413: "request_too_large", 502: "api_error", 504: "api_error"}


def error_body(exc: WireError) -> dict[str, Any]:
    """Anthropic's error shape ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": ERROR_TYPES.get(exc.status, "api_error"), "message": str(exc)}}
