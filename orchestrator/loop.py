"""Runs the orchestrator's event loop: uvloop where installed (Linux, macOS), else asyncio's own.

At thousands of rollouts in flight the loop's own timer and callback handling is most of the
orchestrator's CPU time; uvloop does that work in C (benchmarks/orchestrator.py --loop compares).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory(kind: str = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop factory for ``kind``: ``auto`` (uvloop if installed), ``uvloop``, ``asyncio``.

    Raises:
        ValueError: unknown kind, or ``uvloop`` asked for but not installed (names the fix).
    """
    if kind == "asyncio":
        return None
    if kind not in ("auto", "uvloop"):
        raise ValueError(f"event loop {kind!r}: use auto, uvloop or asyncio")
    try:
        import uvloop
    except ImportError as exc:
        if kind == "uvloop":
            raise ValueError("uvloop is not installed: pip install uvloop, or use the asyncio loop") from exc
        return None
    return uvloop.new_event_loop


def run_loop(coro: Coroutine[Any, Any, T], kind: str = "auto") -> T:
    """``asyncio.run(coro)`` on the loop ``kind`` selects."""
    with asyncio.Runner(loop_factory=loop_factory(kind)) as runner:
        return runner.run(coro)
