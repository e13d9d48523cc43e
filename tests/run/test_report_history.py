"""A run's report keeps its history: every start of the run in ``steps``, ``reward_by_task`` and
``starts`` (each resume marked), no repeated all-zero final step, an earlier run's rows in the same
folder left out. The rows are ``learner.jsonl``'s as :mod:`gymfleet.trainer.worker` writes them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from gymfleet.run.records import DroppedClaim, GenerationTimeline, LearnerStart, TrainReport
from gymfleet.trainer import GroupFilterStats
from gymfleet.run.report import build_report, write_report


def _step(t: float, step: int, n_groups: int = 2, reward: float = 0.5) -> dict[str, Any]:
    return {"event": "step", "t": t, "step": step, "loss": 0.1 * n_groups, "masked_fraction": 0.0,
            "mean_ratio": 1.0 if n_groups else 0.0, "kl": 0.0, "n_tokens": 10 * n_groups, "n_groups": n_groups,
            "mean_reward": reward if n_groups else 0.0, "idle_s": 0.5, "duration_s": 1.0, "published_version": None,
            "reward_by_task": {"echo": reward} if n_groups else {}, "version": step,
            "filter": {"staleness": [0] * n_groups}}


def _start(t: float, step: int, resumed: bool) -> dict[str, Any]:
    return {"event": "start", "t": t, "step": step, "version": step, "resumed": resumed, "device": "cpu"}


def _write(report_dir: Path, rows: list[dict[str, Any]]) -> None:
    (report_dir / "learner.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_resumed_run_reports_every_start_without_a_repeated_final_step(tmp_path: Path) -> None:
    t0 = time.time() - 1000
    rows = [
        _start(t0 - 500, 0, False), _step(t0 - 490, 1),  # an earlier run in the same report folder
        _start(t0 + 1, 0, False), *(_step(t0 + 10 * i, i, reward=0.1 * i) for i in (1, 2, 3)),
        _step(t0 + 35, 3, n_groups=0),  # the budget's last claim: every group dropped, step 3 again, zeros
        {"event": "end", "t": t0 + 36, "step": 3, "version": 3, "idle_s": 0.0},
        # the rerun (more budget): resumes at step 3; killed after step 5, before publishing it
        _start(t0 + 100, 3, True), _step(t0 + 110, 4), _step(t0 + 120, 5, reward=0.2),
        # the third start resumes from v4: step 5 is made again, the lost one superseded
        _start(t0 + 200, 4, True), _step(t0 + 210, 5, reward=0.9),
        {"event": "end", "t": t0 + 215, "step": 5, "version": 5, "idle_s": 0.0},
    ]
    _write(tmp_path, rows)
    report = build_report(tmp_path, "async", GenerationTimeline(started_at=t0 + 199, wall_s=20.0), "r")

    assert [s.step for s in report.steps] == [1, 2, 3, 4, 5]  # each once, no all-zero repeat
    assert [s.start for s in report.steps] == [0, 0, 0, 1, 2]
    assert report.steps[-1].mean_reward == 0.9  # the step the third start made, not the lost one
    assert [(s.step, s.resumed, s.steps_redone) for s in report.starts] == [
        (0, False, 0), (3, True, 0), (4, True, 1)]
    assert report.starts[0].t_s == 0.0 and report.starts[2].t_s == 199.0
    echo = report.reward_by_task["echo"]
    assert [p.start for p in echo] == [0, 0, 0, 1, 2] and echo[0].t_s == 9.0
    # this start's counts stay this start's (the CLI says "N learner steps this start")
    assert report.n_steps == 1 and report.last_step == 5 and report.n_claims_all_dropped == 0

    content = json.loads(write_report(tmp_path, report).read_text())
    assert [s["step"] for s in content["steps"]] == [1, 2, 3, 4, 5] and len(content["starts"]) == 3
    for png in ("reward.png", "learner.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_all_dropped_claims_are_counted_apart_not_as_steps(tmp_path: Path) -> None:
    t0 = time.time()
    _write(tmp_path, [_start(t0 + 1, 0, False), _step(t0 + 2, 1), _step(t0 + 3, 1, n_groups=0)])
    report = build_report(tmp_path, "async", GenerationTimeline(started_at=t0, wall_s=5.0), "r")
    assert [s.step for s in report.steps] == [1] and report.n_claims_all_dropped == 1
    assert report.dropped_claims == [DroppedClaim(1, 3.0, GroupFilterStats())]
    assert report.starts == [LearnerStart(start=0, t=t0 + 1, t_s=1.0, step=0, version=0, resumed=False, steps_redone=0)]
    content = report.to_dict()
    assert content["dropped_claims"][0]["filter"]["staleness"] == [] and content["starts"][0]["t_s"] == 1.0
    assert TrainReport.from_dict(content) == report  # to_dict / from_dict: the one JSON boundary
