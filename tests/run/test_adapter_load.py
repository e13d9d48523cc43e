"""A training run whose adapter loads time out goes on: each version is retried, then skipped with
the previous one kept; rollouts stay stamped with the version they sampled; the report is written
and lists what was skipped. Real gateway, router, store, learner process and bucket; the one
replica is scripted (its adapter loads never answer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.run.config import load_train_config
from gymfleet.run.job import train
from tests.e2e.train_helpers import tiny_train_config

pytestmark = pytest.mark.model


async def test_a_run_whose_adapter_loads_time_out_goes_on_and_writes_its_report(tmp_path: Path) -> None:
    path = tiny_train_config(
        tmp_path, "stuck", policy={"kind": "import", "factory": "tests.orchestrator.fakes:hanging_adapter_gateway"},
        adapter_load={"attempts": 2, "retry_wait_s": 0.05, "timeout_s": 10})
    outcome = await train(load_train_config(path), live=False)
    report = outcome.report.to_dict()
    assert outcome.learner_exitcode == 0 and report["run_status"] == "completed (budget)"
    assert report["last_step"] == 2 and (tmp_path / "report" / "report.json").is_file()
    assert report["adapter_loads"] == [] and report["served_version"] == 0
    assert report["torch_threads"]["learner"] == 1  # measured in the learner process (learner_threads: 1)
    failures = report["adapter_load_failures"]
    assert failures and {f["version"] for f in failures} <= {1, 2}
    for failure in failures:
        assert failure["attempts"] == 2 and "no answer within 0.3 s" in failure["error"], failure
    # the behaviour policy stays truthful: every generated token was sampled with v0
    async with await TrajectoryStore.open(str(tmp_path / "store.db")) as store:
        rows = await store.trajectories("stuck", limit=None)
    generated = [int(v) for r in rows for v, m in zip(r.trajectory.versions, r.trajectory.loss_mask) if m]
    assert generated and set(generated) == {0}
