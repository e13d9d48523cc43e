"""The env contract, checked over every registered env id (in the spirit of Gymnasium's
``utils/env_checker.py``): types of reset/step, gold earns 1, no-op earns 0, close leaves
nothing behind. Families with many instances are checked on their first two; each family's
own tests cover every instance."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gymfleet.envs.base import AgentEnv, ConstantPolicy, Policy
from gymfleet.envs.registry import list_envs, make_agent_env

N_INSTANCES = 2
MAX_STEPS = 100


def _children() -> set[int]:
    """Live child processes of this test process (a sandbox's processes must not outlive it)."""
    me, kids = str(os.getpid()), set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            kids.add(int(entry.name))
    return kids


def _containers() -> set[str]:
    """Docker containers labelled by gymfleet for this process, when a daemon answers."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        client.ping()
    except Exception:
        return set()
    from gymfleet.envs.sandbox.base import LABEL_OWNER_PID

    found = client.containers.list(all=True, filters={"label": f"{LABEL_OWNER_PID}={os.getpid()}"})
    return {c.id for c in found}


async def _play(env: AgentEnv, instance_id: str, *, gold: bool) -> tuple[float, dict]:
    obs, info = await env.reset_async(options={"instance_id": instance_id})
    assert isinstance(obs, str) and env.observation_space.contains(obs)
    assert isinstance(info, dict) and info["instance_id"] == instance_id
    policy: Policy = env.gold_policy() if gold else ConstantPolicy(env.noop_action)
    total = 0.0
    for _ in range(MAX_STEPS):
        action = await policy.act(obs)
        assert isinstance(action, str) and env.action_space.contains(action)
        obs, reward, terminated, truncated, info = await env.step_async(action)
        assert isinstance(obs, str) and env.observation_space.contains(obs)
        assert isinstance(reward, (int, float)) and not isinstance(reward, bool)
        assert type(terminated) is bool and type(truncated) is bool
        assert isinstance(info, dict)
        total += float(reward)
        if terminated or truncated:
            return total, info
    pytest.fail(f"episode of {instance_id} did not end within {MAX_STEPS} steps")


@pytest.mark.parametrize("env_id", list_envs())
async def test_env_contract(env_id: str) -> None:
    children, containers = _children(), _containers()
    env = make_agent_env(env_id)
    try:
        assert isinstance(env.system_prompt, str) and env.system_prompt.strip()
        assert isinstance(env.noop_action, str)
        ids = env.instance_ids()
        assert ids and all(isinstance(i, str) for i in ids) and len(set(ids)) == len(ids)
        for instance_id in ids[:N_INSTANCES]:
            gold, gold_info = await _play(env, instance_id, gold=True)
            assert gold == 1.0, f"{env_id} {instance_id}: gold earned {gold}: {gold_info}"
            noop, noop_info = await _play(env, instance_id, gold=False)
            assert noop == 0.0, f"{env_id} {instance_id}: no-op earned {noop}: {noop_info}"
    finally:
        await env.close_async()
    await env.close_async()  # idempotent
    assert _containers() <= containers, f"{env_id} left Docker containers behind"
    assert _children() <= children, f"{env_id} left processes behind"
