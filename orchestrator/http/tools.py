"""Tools in the prompt and tool calls out of the completion: the documented fallback format.

SmolLM2's chat template (like many small models') has no tool syntax, so the gateway renders
tools the same way for every model, as text that the chat template then wraps like any message:

* the tool list is appended to the system message (one is inserted when the harness sent none):
  ``# Tools`` and one JSON object per line, ``{"name", "description", "parameters"}``, then how to
  call one;
* an assistant turn's tool call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  on its own line after the turn's text (the Hermes/Qwen convention);
* a tool's result is a message of role ``tool`` holding the result's text.

A completion is parsed back by finding those blocks: each one holding a JSON object with a string
``name`` (and an object ``arguments``) becomes a :class:`ToolCall`; a malformed block stays text.
Rendering a parsed completion again gives the key the session tree matches the next call's
history on (``canonical``), so what the harness echoes back is recognised whatever its spacing.
"""

from __future__ import annotations

import functools
import json
import re
import secrets

from gymfleet.core.records import Message
from gymfleet.orchestrator.http.calls import Tool, ToolCall, WireMessage

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(CALL_OPEN) + r"\s*(.*?)\s*" + re.escape(CALL_CLOSE), re.DOTALL)


def tools_prompt(tools: list[Tool]) -> str:
    """The text that offers ``tools`` to the model (appended to the system message)."""
    lines = [json.dumps({"name": t.name, "description": t.description, "parameters": t.parameters}) for t in tools]
    return ("# Tools\n\nYou may call one or more of these tools:\n" + "\n".join(lines)
            + f"\n\nTo call a tool, write {CALL_OPEN}{{\"name\": <tool name>, \"arguments\": <JSON object>}}"
            f"{CALL_CLOSE} on its own line; its result comes back in a message of role tool.")


def render_tool_call(call: ToolCall) -> str:
    """``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` (arguments kept as JSON when they parse)."""
    try:
        arguments = json.loads(call.arguments) if call.arguments else {}
    except json.JSONDecodeError:
        arguments = call.arguments
    return CALL_OPEN + json.dumps({"name": call.name, "arguments": arguments}) + CALL_CLOSE


@functools.lru_cache(maxsize=16384)
def to_template_message(message: WireMessage) -> Message:
    """The chat-template message of one wire message (tool calls written into the text).

    Memoised (the messages are frozen values): a harness re-sends its whole history with each call,
    so a session of n calls would render its earlier messages n(n-1)/2 times."""
    if message.role == "assistant" and message.tool_calls:
        calls = "\n".join(render_tool_call(c) for c in message.tool_calls)
        return Message("assistant", f"{message.content}\n{calls}" if message.content else calls)
    return Message(message.role, message.content)


def to_template_messages(messages: list[WireMessage], tools: list[Tool]) -> list[Message]:
    """The conversation the chat template renders: tools in the system message, calls as text."""
    rendered = [to_template_message(m) for m in messages]
    if not tools:
        return rendered
    block = tools_prompt(tools)
    if rendered and rendered[0].role == "system":
        return [Message("system", f"{rendered[0].content}\n\n{block}"), *rendered[1:]]
    return [Message("system", block), *rendered]


def parse_completion(text: str, tools: list[Tool]) -> tuple[str, list[ToolCall]]:
    """Splits a completion into its text and its tool calls (none when no tools were offered).

    Returns:
        ``(content, tool_calls)``: the text outside well-formed call blocks (stripped), and the calls
        in order, each with a fresh ``call_...`` id.
    """
    if not tools:
        return text, []
    calls: list[ToolCall] = []
    kept: list[str] = []
    last = 0
    for match in _CALL.finditer(text):
        call = _parse_call(match.group(1))
        if call is None:
            continue
        kept.append(text[last:match.start()])
        last = match.end()
        calls.append(call)
    kept.append(text[last:])
    return ("".join(kept).strip() if calls else text), calls


def canonical(text: str, tools: list[Tool]) -> Message:
    """The template message a harness sends back for the completion ``text`` (the tree's key)."""
    content, calls = parse_completion(text, tools)
    return to_template_message(WireMessage("assistant", content, tuple(calls)))


def _parse_call(body: str) -> ToolCall | None:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", {})
    if not isinstance(arguments, dict):
        return None
    return ToolCall(f"call_{secrets.token_hex(12)}", data["name"], json.dumps(arguments))
