"""The OpenAI Responses dialect: ``POST <base>/responses``, JSON or typed SSE events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gymfleet.orchestrator.http.body import arguments_json, field, sampling, text_of
from gymfleet.orchestrator.http.calls import CallRequest, CallResult, Tool, ToolCall, WireMessage
from gymfleet.orchestrator.http.errors import BadRequestError, WireError
from gymfleet.orchestrator.http.openai_chat import ERROR_TYPES, ROLES

PATH = "/v1/responses"


def parse(body: dict[str, Any], cap: int) -> CallRequest:
    """The neutral call of a Responses body (``input`` text or items, ``instructions``, tools).

    Raises:
        BadRequestError: the body is not a valid request (the message names the field).
    """
    raw = field(body, "input", (str, list), required=True)
    messages: list[WireMessage] = []
    instructions = field(body, "instructions", str, "")
    if instructions:
        messages.append(WireMessage("system", instructions))
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
    for i, item in enumerate(items):
        _add_item(messages, item, f"input[{i}]")
    if not messages:
        raise BadRequestError("'input' is empty")
    tools = [_tool(t, i) for i, t in enumerate(field(body, "tools", list, []))]
    return CallRequest(messages, tools, sampling(body, ("max_output_tokens",), "stop", cap),
                       bool(field(body, "stream", bool, False)), str(field(body, "model", str, "gymfleet")))


def _add_item(messages: list[WireMessage], item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise BadRequestError(f"{where}: an input item must be an object")
    kind = item.get("type", "message")
    if kind == "message" and item.get("role") in ROLES:
        messages.append(WireMessage(ROLES[item["role"]], text_of(item.get("content"), where)))
    elif kind == "function_call":
        if not isinstance(item.get("name"), str):
            raise BadRequestError(f"{where}: a function_call needs a name")
        call = ToolCall(str(item.get("call_id", "")), item["name"], arguments_json(item.get("arguments", "{}"), where))
        last = messages[-1] if messages else None
        if last is not None and last.role == "assistant":  # text and calls of one turn come as several items
            messages[-1] = WireMessage("assistant", last.content, (*last.tool_calls, call))
        else:
            messages.append(WireMessage("assistant", "", (call,)))
    elif kind == "function_call_output":
        messages.append(WireMessage("tool", text_of(item.get("output"), where), (), str(item.get("call_id", ""))))
    elif kind != "reasoning":
        raise BadRequestError(f"{where}: unsupported input item type {kind!r}")


def _tool(t: Any, i: int) -> Tool:
    if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("name"), str):
        raise BadRequestError(f"tools[{i}]: only tools of type 'function' with a name are supported")
    return Tool(t["name"], str(t.get("description") or ""), t.get("parameters") or {})


def _message_item(result: CallResult) -> dict[str, Any]:
    return {"id": f"msg_{result.id}", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": result.content, "annotations": [], "logprobs": []}]}


def _call_item(call: ToolCall) -> dict[str, Any]:
    return {"id": f"fc_{call.id}", "type": "function_call", "call_id": call.id, "name": call.name,
            "arguments": call.arguments, "status": "completed"}


def _items(result: CallResult) -> list[dict[str, Any]]:
    items = [_message_item(result)] if result.content or not result.tool_calls else []
    return items + [_call_item(c) for c in result.tool_calls]


def response(result: CallResult, call: CallRequest, status: str = "completed") -> dict[str, Any]:
    """The ``response`` object."""
    done = status == "completed"
    return {
        "id": f"resp_{result.id}", "object": "response", "created_at": result.created, "model": call.model,
        "status": status, "output": _items(result) if done else [], "error": None,
        "incomplete_details": None, "instructions": None, "metadata": {}, "parallel_tool_calls": True,
        "temperature": call.sampling.temperature, "top_p": call.sampling.top_p, "tool_choice": "auto",
        "tools": [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters,
                   "strict": False} for t in call.tools],
        "usage": {"input_tokens": result.n_prompt_tokens, "output_tokens": result.n_completion_tokens,
                  "total_tokens": result.n_prompt_tokens + result.n_completion_tokens,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
        if done else None,
    }


def events(result: CallResult, call: CallRequest) -> Iterator[str]:
    """The typed SSE events, ``response.created`` to ``response.completed``, numbered."""
    n = 0

    def event(kind: str, **data: Any) -> str:
        nonlocal n
        n += 1
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': n - 1, **data})}\n\n"

    yield event("response.created", response=response(result, call, "in_progress"))
    yield event("response.in_progress", response=response(result, call, "in_progress"))
    for index, item in enumerate(_items(result)):
        if item["type"] == "message":
            yield from _message_events(event, item, index)
        else:
            yield event("response.output_item.added", output_index=index, item={**item, "arguments": "",
                                                                             "status": "in_progress"})
            yield event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                        delta=item["arguments"])
            yield event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                        arguments=item["arguments"], name=item["name"])
            yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=response(result, call))


def _message_events(event: Any, item: dict[str, Any], index: int) -> Iterator[str]:
    part = item["content"][0]
    ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
    yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
    yield event("response.content_part.added", **ids, part={**part, "text": ""})
    if part["text"]:
        yield event("response.output_text.delta", **ids, delta=part["text"], logprobs=[])
    yield event("response.output_text.done", **ids, text=part["text"], logprobs=[])
    yield event("response.content_part.done", **ids, part=part)
    yield event("response.output_item.done", output_index=index, item=item)


def error_body(exc: WireError) -> dict[str, Any]:
    """OpenAI's error shape (as Chat Completions)."""
    return {"error": {"message": str(exc), "type": ERROR_TYPES.get(exc.status, "server_error"),
                      "param": None, "code": None}}
