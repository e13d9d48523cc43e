"""The env contract, checked over every registered env id by the shipped ``check_env`` (the
same function `gymfleet envs check ID` runs): types of reset/step, gold earns 1, no-op earns 0,
close leaves nothing behind. Families with many instances are checked on their first two; each
family's own tests cover every instance."""

from __future__ import annotations

import pytest

from gymfleet.envs.check import check_env_async
from gymfleet.envs.registry import list_envs

N_INSTANCES = 2
MAX_STEPS = 100
# Families that register one id per task are sampled here (their own contract tests sweep every
# id on one shared browser): the generic family ids plus these task ids with gold policies.
PER_TASK_FAMILY_PREFIX = "gymfleet/miniwob."
PER_TASK_SAMPLE = ("gymfleet/miniwob.click-button-v0", "gymfleet/miniwob.login-user-v0")


def contract_env_ids() -> list[str]:
    """Every registered id, with per-task families sampled (see PER_TASK_SAMPLE)."""
    return [
        env_id
        for env_id in list_envs()
        if not env_id.startswith(PER_TASK_FAMILY_PREFIX) or env_id in PER_TASK_SAMPLE
    ]


@pytest.mark.parametrize("env_id", contract_env_ids())
async def test_env_contract(env_id: str) -> None:
    report = await check_env_async(env_id, n_instances=N_INSTANCES, max_steps=MAX_STEPS)
    assert report.n_instances >= 1
    assert set(report.gold_rewards.values()) == {1.0}, f"{env_id}: gold earned {report.gold_rewards}"
    assert set(report.noop_rewards.values()) == {0.0}, f"{env_id}: no-op earned {report.noop_rewards}"
