"""Reading a W&B offline run back without W&B's servers: the records of its ``.wandb`` file."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

_BLOCK, _HEADER = 32768, 7


def wandb_records(path: Path) -> list[Any]:
    """The records of a ``.wandb`` file (W&B's LevelDB-log framing: 32 KiB blocks of chunks, each
    ``crc32 u32, length u16, type u8`` (1 full, 2 first, 3 middle, 4 last), after a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending, records = _HEADER, b"", []
    while pos + _HEADER <= len(data):
        if _BLOCK - pos % _BLOCK < _HEADER:  # a block's tail too short for a header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + _HEADER])
        pending += data[pos + _HEADER:pos + _HEADER + length]
        pos += _HEADER + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def history_and_summary(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The history rows (key -> value) and the final summary of the offline run in ``run_dir``."""
    records = wandb_records(next(run_dir.glob("run-*.wandb")))
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    summary = {i.key: json.loads(i.value_json) for r in records if r.WhichOneof("record_type") == "summary"
               for i in r.summary.update}
    return history, summary
