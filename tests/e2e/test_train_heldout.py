"""`gymfleet train --require-learning` on a run that cannot learn: every reward is 0 (Coin-v0 with
p_solve 0, scripted gateway), so every group has zero variance and no learner step is made. The
CLI says why in one line and exits 3; the held-out evaluation still lands in report.json, and
(``report_to: wandb``, offline) in the W&B run's table and summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.train_helpers import run_train, tiny_train_config
from tests.run.wandb_files import history_and_summary

pytestmark = pytest.mark.model


def test_require_learning_exits_3_with_the_reason_when_nothing_trained(tmp_path: Path) -> None:
    config = tiny_train_config(
        tmp_path, "nolearn", budget={"max_steps": 1, "max_wall_s": 40},
        policy={"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"},
        learner={"lora_rank": 1, "groups_per_step": 2, "micro_batch_size": 4, "max_tokens": 256,
                 "dynamic_sampling": {"enabled": True, "max_extra_claims": 0, "max_wait_s": 0}},
        heldout={"enabled": True, "instances": {"coin": ["w060", "w061"]}, "samples_per_instance": 2},
        tasks=[{"name": "coin", "env_id": "tests.orchestrator.fakes:gymfleet-test/Coin-v0",
                "env_kwargs": {"n_instances": 64, "p_solve": 0.0, "step_delay_s": 0.5}, "group_size": 2, "max_turns": 1,
                "sampling": {"max_new_tokens": 6}}], report_to=["wandb"])
    code, out = run_train(config, timeout_s=300, flags=("--require-learning",))
    assert code == 3, out
    assert "--require-learning: no learner step: every claimed group had zero reward variance (" in out
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["n_steps"] == 0 and report["no_learning"].startswith("no learner step: every claimed group")
    assert report["evaluation"]["by_family"]["coin"]["base"]["pass_at_1"] == 0.0
    assert "held-out pass@1 (reward >= 1) coin: base 0.000 ± 0.000 (n=4)" in out
    (run_dir,) = (tmp_path / "report" / "wandb").glob("offline-run-*")
    history, summary = history_and_summary(run_dir)
    assert summary["heldout/coin/base/pass_at_1"] == 0.0 and summary["heldout/coin/base/mean_reward"] == 0.0
    (table,) = (run_dir / "files" / "media" / "table").glob("heldout_*.table.json")
    assert json.loads(table.read_text())["data"] == [["coin", "base", None, 0.0, 0.0, 4, 0.0]]
    assert [row["tasks/coin/completed"] for row in history if "tasks/coin/completed" in row]  # the rollouts' curves
    steps = [r for r in map(json.loads, (tmp_path / "report" / "learner.jsonl").read_text().splitlines())
             if r["event"] == "step"]  # claims whose groups were all dropped: the learner's rows, nothing trained
    first_of_step: dict[int, int] = {}  # one point per learner step: the first row of each step is sent
    for r in steps:
        first_of_step.setdefault(r["step"], r["n_groups"])
    assert [(r["step/learner"], r["learner/n_groups"]) for r in history if "step/learner" in r] == [
        *first_of_step.items()] != []
    assert "wandb:" not in out  # offline and silent: nothing of W&B's own on the console
