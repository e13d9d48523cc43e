"""`gymfleet train configs/train-mixed-harbor.yaml` end to end on a tiny budget: Harbor task folders
(Docker), the terminal easy tier and MiniWoB train together; the warm start's Harbor demonstrations
are the tasks' solve.sh, and every family's rollouts reach the store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.trainer.bucket import AdapterBucket
from tests.e2e.train_helpers import ROOT, run_train

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.docker, pytest.mark.browser, pytest.mark.timeout(3600)]

RUN_ID = "harbor-mix"


async def _rollouts(store_url: str) -> list:
    async with await TrajectoryStore.open(store_url) as store:
        return await store.trajectories(RUN_ID, limit=None)


def test_harbor_tasks_train_with_terminal_and_miniwob(tmp_path: Path, docker_available: bool) -> None:
    overrides = [f"run_id={RUN_ID}", f"store={tmp_path}/store.db", f"metrics_path={tmp_path}/metrics.jsonl",
                 f"bucket={tmp_path}/bucket", f"report_dir={tmp_path}/report", "budget.max_steps=2"]
    code, out = run_train(ROOT / "configs" / "train-mixed-harbor.yaml", *overrides, timeout_s=3300)
    assert code == 0, out[-4000:]
    assert "published v1" in out, out[-4000:]
    assert AdapterBucket(str(tmp_path / "bucket"), RUN_ID).versions()[-1] >= 2
    rollouts = asyncio.run(_rollouts(str(tmp_path / "store.db")))
    tasks = {s.task for s in rollouts}
    assert {"harbor", "terminal", "miniwob"} <= tasks, tasks
