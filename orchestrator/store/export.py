"""Exports a run's trajectories to JSONL or parquet, streaming, in a schema `datasets` loads.

Arrays become lists (``token_ids`` int32, ``loss_mask`` uint8, ``logprobs`` float32,
``versions`` int32); ``metrics`` and ``timings`` are JSON strings, since their keys differ from
task to task and parquet wants one schema per file.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from gymfleet.core.records import RolloutStatus
from gymfleet.orchestrator.store.codec import row_to_json
from gymfleet.orchestrator.store.schema import TrajectoryRow

TRAJ = TrajectoryRow.__table__
FORMATS = ("jsonl", "parquet")

SCHEMA = pa.schema([
    ("rollout_id", pa.string()), ("run_id", pa.string()), ("group_id", pa.string()),
    ("task", pa.string()), ("env_id", pa.string()), ("instance_id", pa.string()),
    ("token_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.uint8())),
    ("logprobs", pa.list_(pa.float32())), ("versions", pa.list_(pa.int32())),
    ("n_tokens", pa.int64()), ("n_generated_tokens", pa.int64()),
    ("policy_version_min", pa.int64()), ("policy_version_max", pa.int64()),
    ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
    ("reward", pa.float64()), ("metrics", pa.string()), ("status", pa.string()),
    ("reason", pa.string()), ("timings", pa.string()), ("created_at", pa.string()),
])


async def _batches(
    engine: AsyncEngine, run_id: str, statuses: list[RolloutStatus] | None, batch_size: int
) -> AsyncIterator[list[dict[str, Any]]]:
    stmt = select(TRAJ).where(TRAJ.c.run_id == run_id).order_by(TRAJ.c.created_at, TRAJ.c.rollout_id)
    if statuses:
        stmt = stmt.where(TRAJ.c.status.in_(statuses))
    async with engine.connect() as conn:
        result = await conn.stream(stmt.execution_options(yield_per=batch_size))
        async for part in result.partitions(batch_size):
            yield [row_to_json(row) for row in part]


async def export_run(
    engine: AsyncEngine,
    run_id: str,
    path: Path,
    fmt: str = "jsonl",
    *,
    statuses: list[RolloutStatus] | None = None,
    batch_size: int = 500,
) -> int:
    """Writes every trajectory of ``run_id`` (optionally only some statuses) to ``path``.

    Returns:
        The number of trajectories written.

    Raises:
        ValueError: ``fmt`` is not jsonl or parquet.
    """
    if fmt not in FORMATS:
        raise ValueError(f"export format {fmt!r}: use one of {', '.join(FORMATS)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    n = 0
    if fmt == "jsonl":
        with tmp.open("w", encoding="utf-8") as out:
            async for batch in _batches(engine, run_id, statuses, batch_size):
                out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in batch)
                n += len(batch)
    else:
        with pq.ParquetWriter(tmp, SCHEMA) as writer:
            async for batch in _batches(engine, run_id, statuses, batch_size):
                writer.write_table(pa.Table.from_pylist(batch, schema=SCHEMA))
                n += len(batch)
    tmp.replace(path)
    return n
