"""The env contract over every registered browser env, on one shared Chromium.

Every id is made and checked (spec, instances, prompt, no-op action), and every per-task id
passes `gymfleet envs check` (gymfleet's ``check_env``: types, gold earns 1, no-op earns 0, close
leaves nothing) on the shared browser, the cheap way to cover each one in CI (Gymnasium's API
checker, which makes its own browser per env, runs on their class through Browser-v0 in
tests/envs/test_contract.py).
Every task is then played through one env on one page (a per-id page would cost a browser
context per id): reset, a malformed action answered by an observation, a no-op (reward 0,
truncated at max_turns), and the gold policy's availability.
"""

from __future__ import annotations

import gymnasium
import pytest

from gymfleet.envs import registry
from gymfleet.envs.base import AgentEnv
from gymfleet.envs.browser.env import BrowserEnv
from gymfleet.envs.browser.errors import NoGoldPolicyError
from gymfleet.envs.browser.gold import SOLVERS
from gymfleet.envs.browser.miniwob import ENV_ENTRY_POINT, GENERIC_ENV_ID


def browser_env_ids() -> list[str]:
    return [
        env_id
        for env_id in registry.list_envs("gymfleet")
        if gymnasium.registry[env_id].entry_point == ENV_ENTRY_POINT
    ]


def test_every_browser_id_makes_an_agent_env() -> None:
    ids = browser_env_ids()
    assert len(ids) == len(SOLVERS) + 1 and GENERIC_ENV_ID in ids  # the generic id and one per gold policy
    for env_id in ids:
        env = registry.make_agent_env(env_id)  # Chromium starts at the first reset, not here
        try:
            assert isinstance(env, BrowserEnv) and env.spec is not None and env.spec.id == env_id
            assert env.noop_action == "noop()" and "click(id)" in env.system_prompt
            if env_id != GENERIC_ENV_ID:
                assert env.instance_ids() == [env_id.removeprefix("gymfleet/miniwob.")[: -len("-v0")]]
        finally:
            env.close()


@pytest.mark.browser
@pytest.mark.asyncio(loop_scope="session")
async def test_every_per_task_id_passes_envs_check(browser_host) -> None:
    from gymfleet.envs.check import check_env_async

    failures = []
    for env_id in browser_env_ids():
        if env_id == GENERIC_ENV_ID:
            continue  # tests/envs/test_contract.py checks it
        # a short turn limit: the no-op episode runs to it (the gold ones end sooner)
        report = await check_env_async(env_id, env_kwargs={"host": browser_host, "max_turns": 6}, n_instances=1)
        if set(report.gold_rewards.values()) != {1.0} or set(report.noop_rewards.values()) != {0.0}:
            failures.append((env_id, report.gold_rewards, report.noop_rewards))
    assert not failures


@pytest.mark.browser
@pytest.mark.asyncio(loop_scope="session")
async def test_every_task_resets_and_steps(browser_host) -> None:
    env = registry.make_agent_env(GENERIC_ENV_ID, host=browser_host, max_turns=2)
    failures: list[tuple[str, str]] = []
    try:
        assert len(env.instance_ids()) > 100
        for instance in env.instance_ids():
            try:
                await _check(env, instance)
            except Exception as exc:  # collect every failing task, not just the first
                failures.append((instance, f"{type(exc).__name__}: {exc}"))
    finally:
        await env.close_async()
    assert not failures


async def _check(env: AgentEnv, instance: str) -> None:
    obs, info = await env.reset_async(seed=0, options={"instance_id": instance})
    assert env.observation_space.contains(obs) and obs.startswith("Task: ")
    assert info["instance_id"] == instance
    try:
        assert env.gold_policy() is not None and instance in SOLVERS
    except NoGoldPolicyError:
        assert instance not in SOLVERS
    obs, reward, terminated, truncated, _ = await env.step_async("not an action")
    assert "Last action failed" in obs and reward == 0.0 and not terminated and not truncated
    obs, reward, terminated, truncated, _ = await env.step_async(env.noop_action)
    assert env.observation_space.contains(obs)
    assert reward == 0.0 and truncated and not terminated
