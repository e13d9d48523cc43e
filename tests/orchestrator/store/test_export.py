"""Exports load with `datasets`, token-exact, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np
import pytest

from gymfleet.orchestrator.records import RolloutStatus
from gymfleet.orchestrator.store import TrajectoryStore
from tests.orchestrator.store.conftest import fill_group

RUN = "run-e"


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
async def test_export_loads_with_datasets(store: TrajectoryStore, tmp_path: Path, fmt: str) -> None:
    await store.start_run(RUN, {})
    await fill_group(store, RUN, "alpha", size=3)
    await fill_group(store, RUN, "beta", size=3)
    path = tmp_path / f"out.{fmt}"
    assert await store.export(RUN, path, fmt) == 6
    ds = datasets.load_dataset("json" if fmt == "jsonl" else "parquet", data_files=str(path), split="train")
    assert len(ds) == 6
    stored = {s.trajectory.rollout_id: s.trajectory for s in await store.trajectories(RUN, limit=None)}
    for row in ds:
        traj = stored[row["rollout_id"]]
        assert np.array_equal(np.asarray(row["token_ids"], np.int32), traj.token_ids)
        assert np.array_equal(np.asarray(row["logprobs"], np.float32), traj.logprobs)
        assert row["messages"][1] == {"role": "assistant", "content": "alpha"}
        assert row["status"] == "ok"


async def test_export_filters_by_status_and_rejects_bad_format(store: TrajectoryStore, tmp_path: Path) -> None:
    await store.start_run(RUN, {})
    await fill_group(store, RUN, "alpha", size=2)
    assert await store.export(RUN, tmp_path / "x.jsonl", statuses=[RolloutStatus.aborted]) == 0
    with pytest.raises(ValueError, match="jsonl, parquet"):
        await store.export(RUN, tmp_path / "x.csv", "csv")
