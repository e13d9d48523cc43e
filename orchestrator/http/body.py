"""Reading a dialect's JSON body: typed fields or a one-line BadRequestError naming the field."""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import ValidationError

from gymfleet.core.records import SamplingParams
from gymfleet.orchestrator.http.errors import BadRequestError


def field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = None,
          required: bool = False) -> Any:
    """``body[name]`` checked against ``kind``.

    Raises:
        BadRequestError: missing while required, or of the wrong type.
    """
    if name not in body or body[name] is None:
        if required:
            raise BadRequestError(f"missing required field {name!r}")
        return default
    value = body[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
        raise BadRequestError(f"field {name!r} has the wrong type: {type(value).__name__}")
    return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def text_of(content: Any, where: str, types: tuple[str, ...] = ("text", "input_text", "output_text")) -> str:
    """The text of a content field: a string, or a list of text parts (their texts joined).

    Raises:
        BadRequestError: not a string or a list of text parts.
    """
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in types or not isinstance(part.get("text"), str):
                raise BadRequestError(f"{where}: only text content parts are supported, got {str(part)[:80]}")
            texts.append(part["text"])
        return "".join(texts)
    raise BadRequestError(f"{where}: content must be a string or a list of text parts")


def arguments_json(value: Any, where: str) -> str:
    """Tool-call arguments as JSON text of an object (from text or an object).

    Raises:
        BadRequestError: not JSON text of an object, nor an object.
    """
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, str):
        try:
            return _canonical_arguments(value)
        except json.JSONDecodeError as exc:
            raise BadRequestError(f"{where}: arguments are not valid JSON ({exc.msg})") from exc
    raise BadRequestError(f"{where}: arguments must be a JSON object")


@functools.lru_cache(maxsize=4096)
def _canonical_arguments(text: str) -> str:
    """``json.dumps(json.loads(text))``, memoised: a harness re-sends every earlier tool call's
    arguments with each call, so a session of n calls would parse them n(n-1)/2 times."""
    return json.dumps(json.loads(text) if text else {})


def sampling(body: dict[str, Any], max_tokens_keys: tuple[str, ...], stop_key: str, cap: int) -> SamplingParams:
    """The call's sampling settings; ``max_new_tokens`` at most ``cap``.

    Raises:
        BadRequestError: a value out of range (names the field).
    """
    max_tokens = next((body[k] for k in max_tokens_keys if body.get(k) is not None), cap)
    stop = body.get(stop_key) or []
    stop = [stop] if isinstance(stop, str) else stop
    try:
        return SamplingParams(
            temperature=body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0,
            top_p=body.get("top_p", 1.0) if body.get("top_p") is not None else 1.0,
            max_new_tokens=min(int(max_tokens), cap) if isinstance(max_tokens, int) else max_tokens,
            stop=stop, seed=body.get("seed"),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BadRequestError(f"invalid sampling field {'.'.join(map(str, first['loc']))}: {first['msg']}") from exc
