"""Adapter names that carry their policy version (``<run>-v000012``), so no cache mixes policies."""

from __future__ import annotations

import re

_VERSION = re.compile(r"-v(\d+)$")


def adapter_name(run_id: str, version: int) -> str:
    """The adapter name of ``version`` of ``run_id``, e.g. ``adapter_name("r1", 12) == "r1-v000012"``."""
    if version < 1:
        raise ValueError(f"adapter versions start at 1 (0 is the base model), got {version}")
    return f"{run_id}-v{version:06d}"


def adapter_version(name: str | None) -> int:
    """The policy version in an adapter name; 0 for the base model (``None``) or an unversioned name."""
    if name is None:
        return 0
    match = _VERSION.search(name)
    return int(match.group(1)) if match else 0
