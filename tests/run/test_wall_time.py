"""The report's wall-time breakdown: the job's stages, and what rollouts, learner and loads spent."""

from __future__ import annotations

from gymfleet.run.records import AdapterLoad, GrpoTimes
from gymfleet.run.report import wall_time
from gymfleet.trainer import StepRow


def _step(duration_s: float, idle_s: float) -> StepRow:
    return StepRow(step=1, loss=0.0, masked_fraction=0.0, mean_ratio=1.0, kl=0.0, n_tokens=1, n_groups=1,
                   mean_reward=0.0, duration_s=duration_s, idle_s=idle_s)


def test_stages_and_sums() -> None:
    timings = [{"generation_s": 1.5, "env_s": 0.5, "reset_s": 0.25, "close_s": 0.1, "total_s": 2.5},
               {"generation_s": 2.0, "env_s": 1.0, "reset_s": 0.25}]
    out = wall_time({"warm_start": 100.0, "grpo": 400.0, "heldout": 200.0}, timings,
                    [_step(3.0, 1.0), _step(4.0, 0.0)], [AdapterLoad(0.0, 1, 0.5), AdapterLoad(1.0, 2, 0.75)])
    assert out.stages_s == {"warm_start": 100.0, "grpo": 400.0, "heldout": 200.0, "total": 700.0}
    assert out.grpo == GrpoTimes(rollouts=2, generation_s=3.5, env_s=1.5, reset_s=0.5, close_s=0.1,
                                 learner_step_s=7.0, learner_idle_s=1.0, adapter_load_s=1.2)


def test_a_run_that_did_nothing() -> None:
    out = wall_time({"warm_start": 0.0, "grpo": 5.0}, [], [], [])
    assert out.grpo.rollouts == 0 and out.grpo.learner_step_s == 0.0
    assert out.stages_s["total"] == 5.0
