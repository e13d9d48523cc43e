"""Converts trajectories to and from table rows: arrays as little-endian numpy bytes, JSON made safe."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from gymfleet.core.records import Message, RolloutStatus, Trajectory
from gymfleet.orchestrator.store.schema import utcnow

# Fixed byte order, so a store written on one machine reads the same on any other.
DTYPES = {"token_ids": "<i4", "loss_mask": "u1", "logprobs": "<f4", "versions": "<i4"}


def array_to_bytes(values: np.ndarray, dtype: str) -> bytes:
    """``values`` as raw bytes of ``dtype`` (no header)."""
    return np.ascontiguousarray(values, dtype=dtype).tobytes()


def bytes_to_array(data: bytes, dtype: str) -> np.ndarray:
    """The inverse of :func:`array_to_bytes` (a writable copy, native byte order)."""
    return np.frombuffer(data, dtype=dtype).astype(np.dtype(dtype).newbyteorder("="))


UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""Code points no store or export can hold: lone surrogates (UTF-8 cannot encode them) and NUL
(PostgreSQL text refuses it)."""


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate and NUL replaced by U+FFFD (the replacement character).

    Env output (a web page's text, a binary file cat'ed in a terminal) is untrusted: unclean, it
    makes a tokenizer raise mid-rollout and every later JSONL or parquet export of the run fail.
    """
    return UNSTORABLE.sub("\ufffd", text)


def json_safe(value: Any) -> Any:
    """``value`` made JSON-serialisable: numpy scalars and arrays become Python ones, unknown
    objects their ``str``, non-finite floats ``None`` (PostgreSQL's JSON rejects NaN), strings
    :func:`clean_text`-ed."""
    if isinstance(value, Mapping):  # a dict, or an info's Volatile (gymfleet.envs.info)
        return {clean_text(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        return json_safe(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return clean_text(value)
    if value is None or isinstance(value, int | bool):
        return value
    return clean_text(str(value))


def to_values(traj: Trajectory, *, sample_id: str | None = None, task: str = "") -> dict[str, Any]:
    """The column values of one trajectory's row (policy version bounds over generated tokens)."""
    generated = traj.versions[traj.loss_mask.astype(bool)]
    return dict(
        rollout_id=traj.rollout_id,
        run_id=traj.run_id,
        group_id=traj.group_id,
        sample_id=sample_id,
        env_id=traj.env_id,
        instance_id=traj.instance_id,
        task=task,
        **{name: array_to_bytes(getattr(traj, name), dtype) for name, dtype in DTYPES.items()},
        n_tokens=traj.n_tokens,
        n_generated_tokens=traj.n_generated_tokens,
        policy_version_min=int(generated.min()) if len(generated) else -1,
        policy_version_max=int(generated.max()) if len(generated) else -1,
        messages=[{"role": m.role, "content": clean_text(m.content)} for m in traj.messages],
        reward=float(traj.reward) if math.isfinite(traj.reward) else 0.0,
        metrics=json_safe(traj.metrics),
        status=RolloutStatus(traj.status),
        reason=clean_text(traj.reason),
        timings=json_safe(traj.timings),
        created_at=utcnow(),
    )


def from_row(row: Any) -> Trajectory:
    """The trajectory of one row (ORM object or Core row of ``trajectories``), token-exact."""
    return Trajectory(
        rollout_id=row.rollout_id,
        run_id=row.run_id,
        group_id=row.group_id,
        env_id=row.env_id,
        instance_id=row.instance_id,
        **{name: bytes_to_array(getattr(row, name), dtype) for name, dtype in DTYPES.items()},
        messages=[Message(m["role"], m["content"]) for m in row.messages],
        reward=row.reward,
        metrics=dict(row.metrics or {}),
        status=RolloutStatus(row.status),
        reason=row.reason,
        timings=dict(row.timings or {}),
    )


def row_to_json(row: Any) -> dict[str, Any]:
    """One row as a JSON-ready dict with arrays as lists (the export format)."""
    return {
        "rollout_id": row.rollout_id,
        "run_id": row.run_id,
        "group_id": row.group_id,
        "task": row.task,
        "env_id": row.env_id,
        "instance_id": row.instance_id,
        **{name: bytes_to_array(getattr(row, name), dtype).tolist() for name, dtype in DTYPES.items()},
        "n_tokens": row.n_tokens,
        "n_generated_tokens": row.n_generated_tokens,
        "policy_version_min": row.policy_version_min,
        "policy_version_max": row.policy_version_max,
        "messages": json_safe(list(row.messages)),  # clean even in a store written before the rollout cleaned it
        "reward": row.reward,
        "metrics": json.dumps(json_safe(row.metrics), sort_keys=True),
        "status": RolloutStatus(row.status).value,
        "reason": clean_text(row.reason),
        "timings": json.dumps(row.timings, sort_keys=True),
        "created_at": row.created_at.isoformat(),
    }
