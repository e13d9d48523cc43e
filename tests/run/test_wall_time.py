"""The report's wall-time breakdown: the job's stages, and what rollouts, learner and loads spent."""

from __future__ import annotations

from gymfleet.run.report import wall_time


def test_stages_and_sums() -> None:
    timings = [{"generation_s": 1.5, "env_s": 0.5, "reset_s": 0.25, "close_s": 0.1, "total_s": 2.5},
               {"generation_s": 2.0, "env_s": 1.0, "reset_s": 0.25}]
    report = {"steps": [{"duration_s": 3.0, "idle_s": 1.0}, {"duration_s": 4.0, "idle_s": 0.0}],
              "adapter_loads": [{"load_s": 0.5}, {"load_s": 0.75}]}
    out = wall_time({"warm_start": 100.0, "grpo": 400.0, "heldout": 200.0}, timings, report)
    assert out["stages_s"] == {"warm_start": 100.0, "grpo": 400.0, "heldout": 200.0, "total": 700.0}
    assert out["grpo"] == {"rollouts": 2, "generation_s": 3.5, "env_s": 1.5, "reset_s": 0.5, "close_s": 0.1,
                           "learner_step_s": 7.0, "learner_idle_s": 1.0, "adapter_load_s": 1.2}


def test_a_run_that_did_nothing() -> None:
    out = wall_time({"warm_start": 0.0, "grpo": 5.0}, [], {})
    assert out["grpo"]["rollouts"] == 0 and out["grpo"]["learner_step_s"] == 0.0
    assert out["stages_s"]["total"] == 5.0
