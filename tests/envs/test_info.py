"""``info["volatile"]``: kept, stored, merged, and skipped by Gymnasium's step-determinism check
(both checkers catch an env that puts a wall time anywhere else)."""

from __future__ import annotations

import itertools
import json

import gymnasium
import pytest
from gymnasium.utils.env_checker import data_equivalence

from gymfleet.envs.check import check_env, check_gymnasium_api
from gymfleet.envs.errors import EnvCheckError
from gymfleet.envs.info import VOLATILE_KEY, Volatile, add_volatile, merge_info
from gymfleet.orchestrator.store.codec import json_safe
from tests.fakes import EchoEnv

_CLOCK = itertools.count()


class TimedEchoEnv(EchoEnv):
    """EchoEnv whose step info carries a value that changes on every call, at the top level."""

    async def step_async(self, action: str):
        obs, reward, terminated, truncated, info = await super().step_async(action)
        return obs, reward, terminated, truncated, {**info, "step_s": next(_CLOCK)}


class VolatileEchoEnv(EchoEnv):
    """The same value, under info["volatile"]."""

    async def step_async(self, action: str):
        obs, reward, terminated, truncated, info = await super().step_async(action)
        return obs, reward, terminated, truncated, add_volatile(info, step_s=next(_CLOCK))


class DictVolatileEchoEnv(EchoEnv):
    """A plain dict under the key: Gymnasium would compare it."""

    async def step_async(self, action: str):
        obs, reward, terminated, truncated, info = await super().step_async(action)
        return obs, reward, terminated, truncated, {**info, VOLATILE_KEY: {"step_s": next(_CLOCK)}}


IDS = {"gymfleettest/Timed-v0": "TimedEchoEnv", "gymfleettest/Volatile-v0": "VolatileEchoEnv"}


@pytest.fixture(autouse=True, scope="module")
def registered() -> None:
    for env_id, cls in IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=f"tests.envs.test_info:{cls}")


def test_volatile_compares_by_keys_and_keeps_its_values() -> None:
    a, b = Volatile(rollout_id="a1", render_s=0.8), Volatile({"rollout_id": "b2"}, render_s=1.9)
    assert a == b and a != Volatile(rollout_id="a1") and dict(a) == {"rollout_id": "a1", "render_s": 0.8}
    assert data_equivalence({"turn": 1, VOLATILE_KEY: a}, {"turn": 1, VOLATILE_KEY: b})
    assert not data_equivalence({"turn": 1, VOLATILE_KEY: a}, {"turn": 2, VOLATILE_KEY: b})


def test_merge_keeps_both_volatile_parts() -> None:
    info = add_volatile({"instance_id": "x"}, rollout_id="r1")
    merge_info(info, {"reward": 1.0, VOLATILE_KEY: Volatile(grading_s=0.5)})
    assert info["reward"] == 1.0 and dict(info[VOLATILE_KEY]) == {"rollout_id": "r1", "grading_s": 0.5}


def test_the_store_keeps_the_values() -> None:
    stored = json.loads(json.dumps(json_safe({"turn": 1, VOLATILE_KEY: Volatile(render_s=0.25)})))
    assert stored == {"turn": 1, VOLATILE_KEY: {"render_s": 0.25}}


def test_gymnasiums_checker_fails_a_wall_time_at_the_top_level_with_the_fix() -> None:
    with pytest.raises(EnvCheckError, match=r"Deterministic step info .* belong under info\['volatile'\]"):
        check_gymnasium_api("gymfleettest/Timed-v0")


def test_gymnasiums_checker_passes_it_under_volatile() -> None:
    check_gymnasium_api("gymfleettest/Volatile-v0")
    report = check_env("gymfleettest/Volatile-v0")
    assert report.gymnasium_checked and report.gold_rewards == {"alpha": 1.0, "beta": 1.0}


def test_a_plain_dict_under_volatile_breaks_the_contract() -> None:
    with pytest.raises(EnvCheckError, match=r"info\['volatile'\] must be a gymfleet.envs.info.Volatile"):
        check_env(DictVolatileEchoEnv())
