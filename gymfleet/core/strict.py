"""StrictModel: the base of every config model. Unknown keys are refused, naming the nearest valid one.

``sampling: {temprature: 0.1}`` fails with ``tasks.0.sampling: unknown key 'temprature': did you
mean 'temperature'?`` instead of being ignored. :func:`validation_problems` turns a pydantic
error into that one line per bad field.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

_PREFIXES = ("Value error, ", "Assertion failed, ")


def unknown_key_message(key: object, known: Iterable[str]) -> str:
    """``unknown key 'x': did you mean 'y'?`` (or the valid keys, when none is near)."""
    known = sorted(known)
    near = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    if near:
        return f"unknown key {key!r}: did you mean {near[0]!r}?"
    return f"unknown key {key!r}; valid keys: {', '.join(known)}"


class StrictModel(BaseModel):
    """A pydantic model that refuses unknown keys and names the nearest valid key."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        known = set(cls.model_fields)
        known |= {f.alias for f in cls.model_fields.values() if f.alias}
        unknown = [k for k in data if k not in known]
        if unknown:
            raise ValueError("; ".join(unknown_key_message(k, known) for k in unknown))
        return data


def validation_problems(exc: ValidationError, drop_root: str | None = None, root: str | None = None) -> str:
    """Every bad field of a pydantic error, as ``a.b: message; ...``.

    Args:
        drop_root: a first path element to leave out (a field that is the document's top level).
        root: a first path element to add (the key the validated document sits under, such as
            ``env_kwargs``).
    """
    problems = []
    for error in exc.errors():
        loc = list(error["loc"])
        if drop_root is not None and loc[:1] == [drop_root]:
            loc = loc[1:]
        if root is not None:
            loc = [root, *loc]
        message = error["msg"]
        for prefix in _PREFIXES:
            message = message.removeprefix(prefix)
        if error["type"] == "extra_forbidden":  # a model that is strict without StrictModel
            message = f"unknown key {loc[-1]!r}"
        problems.append(f"{'.'.join(map(str, loc)) or '(top)'}: {message}")
    return "; ".join(problems)
