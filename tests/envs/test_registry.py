from __future__ import annotations

import gymnasium
import pytest

from gymfleet.envs import registry
from gymfleet.envs.base import ConstantPolicy
from gymfleet.envs.episode import run_episode
from gymfleet.envs.errors import UnknownEnvError

ECHO_ID = "gymfleettest/Echo-v0"


@pytest.fixture(autouse=True)
def echo_registered():
    if ECHO_ID not in gymnasium.registry:
        gymnasium.register(ECHO_ID, entry_point="tests.fakes:EchoEnv")
    yield


def test_unknown_id_lists_known_ones() -> None:
    with pytest.raises(UnknownEnvError) as err:
        registry.make("gymfleettest/Ecko-v0")
    assert ECHO_ID in str(err.value)
    assert "Did you mean" in str(err.value)


def test_sync_gymnasium_api_drives_async_core() -> None:
    env = registry.make(ECHO_ID)
    obs, info = env.reset(options={"instance_id": "beta"})
    assert obs == "Say 'beta'." and info["instance_id"] == "beta"
    obs, reward, terminated, truncated, _ = env.step("beta")
    assert (reward, terminated, truncated) == (1.0, True, False)
    env.close()
    assert env.unwrapped.closed


async def test_async_episode_gold_and_noop() -> None:
    env = registry.make_agent_env(ECHO_ID)
    await env.reset_async(options={"instance_id": "alpha"})
    gold = await run_episode(env, env.gold_policy(), instance_id="alpha")
    noop = await run_episode(env, ConstantPolicy(env.noop_action), instance_id="alpha")
    await env.close_async()
    assert gold.reward == 1.0 and noop.reward == 0.0
    assert gold.terminated and len(gold.turns) == 1


def test_list_envs_includes_plugin_registered_ids() -> None:
    assert ECHO_ID in registry.list_envs()


def test_plain_gymnasium_make_after_importing_the_registry() -> None:
    """`import gymfleet.envs.registry` is enough for `gymnasium.make` (fresh interpreter)."""
    import subprocess
    import sys

    code = (
        "import gymnasium, gymfleet.envs.registry\n"
        "assert gymnasium.spec('gymfleet/Terminal-v0').entry_point.startswith('gymfleet.')\n"
        "assert gymnasium.spec('gymfleet/miniwob.click-button-v0')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_unknown_id_message_folds_large_families() -> None:
    with pytest.raises(UnknownEnvError) as err:
        registry.make("gymfleet/Terminl-v0")
    message = str(err.value)
    assert "gymfleet/Terminal-v0" in message and "gymfleet envs list" in message
    assert "gymfleet/miniwob.<task>-v0 ids" in message and "miniwob.use-slider-v0" not in message
