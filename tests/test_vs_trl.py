"""benchmarks/vs_trl.py's headline: each system's wall time to FIRST reach the same held-out reward."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "vs_trl.py"


@pytest.fixture(scope="module")
def vs_trl():
    spec = importlib.util.spec_from_file_location("vs_trl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def curve(*points: tuple[float, float]) -> list[dict[str, float]]:
    return [{"wall_s": w, "heldout_reward": r} for w, r in points]


def test_time_to_reward_is_each_systems_first_reach_not_a_whole_run(vs_trl) -> None:
    # TRL peaks early (0.97 at 32 s) and runs on to 135 s; gymfleet gets there later but ends sooner.
    systems = {"trl": {"heldout_curve": curve((0, 0.2), (32, 0.97), (70, 0.95), (135, 0.97)), "wall_s": 135},
               "gymfleet": {"heldout_curve": curve((0, 0.2), (35, 0.78), (59, 0.97), (104, 0.97)), "wall_s": 104}}
    got = vs_trl.time_to_reward(systems, 0.75)
    assert got["targets"] == {"fixed": 0.75, "trl_best": 0.97}
    assert got["trl"] == {"fixed": 32, "trl_best": 32} and got["gymfleet"] == {"fixed": 35, "trl_best": 59}
    assert got["trl_s_over_gymfleet_s"] == {"fixed": round(32 / 35, 3), "trl_best": round(32 / 59, 3)}


def test_a_target_never_reached_is_null(vs_trl) -> None:
    systems = {"trl": {"heldout_curve": curve((0, 0.2), (10, 0.9))},
               "gymfleet": {"heldout_curve": curve((0, 0.2), (10, 0.5))}}
    got = vs_trl.time_to_reward(systems, 0.95)
    assert got["trl"]["fixed"] is None and got["gymfleet"]["trl_best"] is None
    assert got["trl_s_over_gymfleet_s"] == {"fixed": None, "trl_best": None}
    only = vs_trl.time_to_reward({"gymfleet": systems["gymfleet"]}, 0.5)  # --only gymfleet: no TRL target
    assert only == {"targets": {"fixed": 0.5}, "gymfleet": {"fixed": 10}}


def test_the_shared_start_reaches_nothing(vs_trl) -> None:
    # TRL got worse than the warm start both began from: its best is its best TRAINED point, and a
    # target the start already met is first reached by the first trained point that meets it
    systems = {"trl": {"heldout_curve": curve((0, 0.42), (88, 0.27), (154, 0.25))},
               "gymfleet": {"heldout_curve": curve((0, 0.42), (93, 0.40), (173, 0.71))}}
    got = vs_trl.time_to_reward(systems, 0.4)
    assert got["targets"] == {"fixed": 0.4, "trl_best": 0.27}
    assert got["trl"] == {"fixed": None, "trl_best": 88} and got["gymfleet"] == {"fixed": 93, "trl_best": 93}
    assert got["trl_s_over_gymfleet_s"] == {"fixed": None, "trl_best": round(88 / 93, 3)}


def test_a_held_out_point_carries_its_standard_error(vs_trl) -> None:
    # 3 of 4 solved: sample std sqrt(0.25) = 0.5, se 0.5 / sqrt(4) = 0.25
    assert vs_trl.reward_summary([1.0, 0.0, 1.0, 1.0]) == {"mean_reward": 0.75, "se": 0.25, "n": 4}
    assert vs_trl.reward_summary([1.0]) == {"mean_reward": 1.0, "se": 0.0, "n": 1}


def point(step: int, wall_s: float, reward: float, se: float | None) -> dict[str, float | None]:
    return {"step": step, "wall_s": wall_s, "heldout_reward": reward, "se": se}


def test_curves_agree_step_by_step_within_two_standard_errors(vs_trl) -> None:
    start = {"step": 0, "wall_s": 0.0, "heldout_reward": 0.3}  # the shared start: nobody's point
    systems = {"trl": {"heldout_curve": [start, point(4, 30, 0.60, 0.06), point(8, 60, 0.90, 0.03)]},
               "gymfleet": {"heldout_curve": [start, point(4, 35, 0.75, 0.05), point(8, 59, 0.91, 0.03),
                                              point(12, 90, 0.2, 0.05)]}}  # step 12: TRL has none
    got = vs_trl.curve_agreement(systems, "trl")["gymfleet_vs_trl"]
    # step 4: 0.15 apart, se sqrt(0.06^2 + 0.05^2) = 0.0781: within 2 se (0.156); step 8: 0.01 apart
    assert [(r["step"], r["diff"], r["se_diff"], r["within_2se"]) for r in got["by_step"]] == [
        (4, 0.15, 0.0781, True), (8, 0.01, 0.0424, True)]
    assert got["all_within_2se"] is True
    systems["gymfleet"]["heldout_curve"][1] = point(4, 35, 0.80, 0.05)  # 0.20 apart: outside
    assert vs_trl.curve_agreement(systems, "trl")["gymfleet_vs_trl"]["all_within_2se"] is False
    assert vs_trl.curve_agreement({"gymfleet": systems["gymfleet"]}, "trl") == {}
