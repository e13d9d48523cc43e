"""A model call in neutral form: what every dialect parses a request into and formats a result from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gymfleet.core.records import SamplingParams


@dataclass(frozen=True)
class ToolCall:
    """One tool call of an assistant turn.

    Attributes:
        id: the call's id, echoed back by the harness with the tool's result.
        name: the tool's name.
        arguments: the arguments as JSON text (an object).
    """

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Tool:
    """A tool the harness offers: name, description, JSON-schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class WireMessage:
    """One message of a call's history, dialect-neutral.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: its text ("" when an assistant turn only calls tools).
        tool_calls: the tool calls of an assistant turn.
        tool_call_id: the call a ``tool`` message answers.
    """

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""


@dataclass
class CallRequest:
    """A parsed request: history, tools, sampling, whether to stream, the model name echoed back."""

    messages: list[WireMessage]
    tools: list[Tool]
    sampling: SamplingParams
    stream: bool = False
    model: str = "gymfleet"


@dataclass
class CallResult:
    """What the policy answered to one call.

    Attributes:
        id: the response id (unique per call).
        content: the assistant's text, tool calls removed.
        tool_calls: the tool calls parsed from the completion.
        finish_reason: ``stop``, ``length`` or ``tool_calls``.
        n_prompt_tokens: the prompt's length in tokens.
        n_completion_tokens: tokens sampled.
        created: Unix time of the answer, seconds.
    """

    id: str
    content: str
    tool_calls: list[ToolCall]
    finish_reason: str
    n_prompt_tokens: int
    n_completion_tokens: int
    created: int
