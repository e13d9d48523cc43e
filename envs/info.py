"""``info["volatile"]``: the one info key whose values differ between two runs of the same seed
and actions (wall times, rollout ids, paths named after them, time-discounted scores).

Everything else an env puts in ``info`` is a function of the seed and the actions, as Gymnasium's
``check_env`` expects: its ``check_step_determinism`` resets twice with one seed, steps once with
one action and compares the two infos key by key with ``==`` (``data_equivalence``, recursing
into dicts, lists and arrays). A :class:`Volatile` is none of those, and two of them are equal
when they hold the same keys, so the checker (and any replay comparing infos) compares which
quantities were measured, not their values; the values are kept for the trajectory's metrics::

    info = {"instance_id": "t1", "turn": 2, VOLATILE_KEY: Volatile(rollout_id="a1b2", render_s=0.8)}
    info[VOLATILE_KEY]["render_s"]   # 0.8
    add_volatile(info, grading_s=1.2)  # merged into the same key

Exception, by nature: text an env quotes from the sandbox (command or grader output) may name
the sandbox's temporary folders.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

VOLATILE_KEY = "volatile"


class Volatile(Mapping[str, Any]):
    """A read-only mapping of measured values, equal to another :class:`Volatile` with the same
    keys whatever the values (see the module docstring).

    Args:
        values: name -> JSON-serialisable value (seconds as ``*_s``, ids, paths as str).
        **more: more of them.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any] | None = None, /, **more: Any) -> None:
        self._values: dict[str, Any] = {**(values or {}), **more}

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Volatile):
            return NotImplemented
        return self._values.keys() == other._values.keys()

    __hash__ = None  # type: ignore[assignment]  # equal objects need not have equal values

    def __repr__(self) -> str:
        return f"Volatile({self._values!r})"


def add_volatile(info: dict[str, Any], **values: Any) -> dict[str, Any]:
    """Adds ``values`` under ``info["volatile"]`` (merged with what is there); returns ``info``."""
    info[VOLATILE_KEY] = Volatile({**info.get(VOLATILE_KEY, {}), **values})
    return info


def merge_info(info: dict[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """``info.update(more)``, except that both ``volatile`` parts are merged; returns ``info``."""
    volatile = more.get(VOLATILE_KEY)
    info.update({k: v for k, v in more.items() if k != VOLATILE_KEY})
    return add_volatile(info, **volatile) if volatile else info
