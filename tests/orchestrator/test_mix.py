"""TaskMix: smooth weighted round robin, live weights, automatic mode."""

from __future__ import annotations

from collections import Counter

import pytest

from gymfleet.orchestrator.config import AutoMixConfig
from gymfleet.orchestrator.mix import TaskMix


def picks(mix: TaskMix, n: int, eligible=("a", "b", "c")) -> Counter[str]:
    return Counter(mix.pick(eligible) for _ in range(n))


def test_picks_follow_weights_exactly_over_a_cycle() -> None:
    mix = TaskMix({"a": 5, "b": 3, "c": 2})
    assert picks(mix, 100) == {"a": 50, "b": 30, "c": 20}
    seq = [mix.pick(["a", "b", "c"]) for _ in range(10)]
    assert seq.count("a") == 5 and "aaa" not in "".join(seq)  # smooth: no long bursts


def test_ineligible_and_zero_weight_tasks_are_skipped() -> None:
    mix = TaskMix({"a": 1, "b": 1, "c": 0})
    assert picks(mix, 10, ("b", "c")) == {"b": 10}
    assert mix.pick([]) is None


def test_live_weight_change_takes_effect_at_once() -> None:
    mix = TaskMix({"a": 1, "b": 1})
    picks(mix, 7, ("a", "b"))
    mix.set_weights({"a": 1, "b": 3})
    assert picks(mix, 40, ("a", "b")) == pytest.approx({"a": 10, "b": 30}, abs=1)
    with pytest.raises(ValueError, match="weight must be >= 0"):
        mix.set_weights({"a": -1})


def test_auto_mode_shifts_share_to_disagreeing_tasks_with_a_floor() -> None:
    mix = TaskMix({"solved": 1, "never": 1, "mixed": 1}, AutoMixConfig(enabled=True, floor=0.1, window_groups=8))
    for _ in range(8):
        mix.record_group("solved", [1, 1, 1, 1])
        mix.record_group("never", [0, 0, 0, 0])
        mix.record_group("mixed", [1, 0, 0, 1])
    assert mix.disagreement("mixed") == 1.0 and mix.disagreement("solved") == 0.0
    got = picks(mix, 120, ("solved", "never", "mixed"))
    assert got == {"mixed": 100, "solved": 10, "never": 10}


def test_auto_mode_with_floor_zero_never_stalls() -> None:
    mix = TaskMix({"a": 1}, AutoMixConfig(enabled=True, floor=0.0, window_groups=4))
    for _ in range(4):
        mix.record_group("a", [1, 1])
    assert mix.pick(["a"]) == "a"
