"""MiniWoB++ discovery, reward mapping and registration (no browser needed)."""

from __future__ import annotations

import pytest

from gymfleet.envs import registry
from gymfleet.envs.browser.miniwob import env_id_for, miniwob_task_names, success_reward


def test_the_package_ships_over_a_hundred_tasks() -> None:
    names = miniwob_task_names()
    assert len(names) > 100
    assert {"click-button", "enter-text", "find-greatest", "book-flight"} <= set(names)


@pytest.mark.parametrize(
    ("raw", "done", "reward"),
    [
        (1.0, True, 1.0),
        (1, True, 1.0),
        (0.1, True, 0.0),  # find-greatest's partial credit is not success
        (0.5, True, 0.0),
        (0.999, True, 0.0),
        (-1.0, True, 0.0),
        (0.0, False, 0.0),
        (1.0, False, 0.0),  # not finished yet
        (None, True, 0.0),
    ],
)
def test_only_a_raw_reward_of_one_is_success(raw, done, reward) -> None:
    assert success_reward(raw, done) == reward


def test_every_task_and_the_generic_env_are_registered() -> None:
    ids = registry.list_envs("gymfleet")
    assert "gymfleet/Browser-v0" in ids
    from gymfleet.envs.browser.gold import SOLVERS

    # an id per task with a gold policy (each passes `envs check`); the rest through Browser-v0
    # (before: all 130 had ids, and 111 failed `envs check` for want of a gold policy)
    for name in miniwob_task_names():
        assert (env_id_for(name) in ids) == (name in SOLVERS), name


def test_unknown_browser_id_lists_close_matches() -> None:
    with pytest.raises(registry.UnknownEnvError, match="miniwob.click-button-v0"):
        registry.make("gymfleet/miniwob.click-buton-v0")
