"""Fixtures of the orchestrator tests (the embedded model's session fixtures are in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

# ---- scheduler tests: a run config over the test envs (tests/orchestrator/fakes.py), a store ----

FAKES = "tests.orchestrator.fakes"


def task(name: str, env: str = "SlowEcho-v0", **fields: Any) -> dict[str, Any]:
    """A task entry over one of the test envs."""
    env_kwargs = fields.pop("env_kwargs", {})
    return {"name": name, "env_id": f"{FAKES}:gymfleet-test/{env}",
            "env_kwargs": {"n_instances": 6, "step_delay_s": 0.001, **env_kwargs},
            "group_size": 3, **fields}


def run_config(tmp_path: Path, tasks: list[dict[str, Any]], **fields: Any) -> Any:
    """A RunConfig writing under ``tmp_path``."""
    from gymfleet.orchestrator.config import RunConfig

    return RunConfig.model_validate({
        "run_id": "r1", "store": str(tmp_path / "store.db"), "metrics_path": str(tmp_path / "metrics.jsonl"),
        "max_in_flight": 8, "metrics_interval_s": 0.2, "tasks": tasks, **fields,
    })


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> Any:
    """A fresh SQLite TrajectoryStore under ``tmp_path``."""
    from gymfleet.orchestrator.store import TrajectoryStore

    async with await TrajectoryStore.open(str(tmp_path / "store.db")) as store:
        yield store
