"""Exports load with `datasets`, token-exact, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np
import pytest

from gymfleet.core.records import RolloutStatus
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


def test_cli_export_to_an_unwritable_path_is_a_clear_error(tmp_path: Path) -> None:
    import asyncio

    from typer.testing import CliRunner

    from gymfleet.cli import app

    db = tmp_path / "store.db"

    async def fill() -> None:
        async with await TrajectoryStore.open(str(db)) as s:
            await s.start_run(RUN, {})
            await fill_group(s, RUN, "alpha", size=2)

    asyncio.run(fill())
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "out.jsonl"  # a folder under a plain file cannot be created
    result = CliRunner().invoke(app, ["runs", "export", RUN, str(out), "--store", str(db)])
    assert result.exit_code == 2, result.output
    assert "cannot write" in result.output and isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("command", [["list"], ["show", RUN], ["export", RUN, "out.jsonl"]])
def test_cli_runs_on_a_missing_sqlite_store_fails_and_creates_nothing(tmp_path: Path, command: list[str]) -> None:
    from typer.testing import CliRunner

    from gymfleet.cli import app

    store = tmp_path / "typo" / "store.db"
    result = CliRunner().invoke(app, ["runs", *command, "--store", str(store)])
    assert result.exit_code == 2, result.output
    assert "no store at" in result.output and not store.parent.exists()
