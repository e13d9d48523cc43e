"""SandboxEnv's turn limit: the env's own and the caller's (a run's task) meet in one place."""

from __future__ import annotations

import pytest

from gymfleet.envs.resources import EnvResources, ResourcesConfig
from gymfleet.envs.sandbox_env import SandboxEpisode
from tests.envs.terminal.fake_sandbox import FakeBackend
from tests.envs.test_check import WordEnv

OWN_LIMIT = 3


class LimitedWordEnv(WordEnv):
    def max_turns(self, ep: SandboxEpisode[str]) -> int:
        return OWN_LIMIT


async def _turns_until_truncated(env: LimitedWordEnv, caller: int | None) -> int:
    options = {"instance_id": "a"} | ({"max_turns": caller} if caller is not None else {})
    await env.reset_async(options=options)
    for turn in range(1, 10):
        _, _, terminated, truncated, _ = await env.step_async("```bash\ntrue\n```")
        assert not terminated
        if truncated:
            return turn
    raise AssertionError("never truncated")


@pytest.mark.parametrize(("caller", "expected"), [(None, OWN_LIMIT), (1, 1), (2, 2), (OWN_LIMIT + 4, OWN_LIMIT)])
async def test_the_lower_of_the_envs_and_the_callers_limit_ends_the_episode(caller: int | None, expected: int) -> None:
    async with EnvResources.open(ResourcesConfig.private(), backends={"fake": FakeBackend()}, probe=()) as resources:
        env = LimitedWordEnv(sandbox="fake", resources=resources)
        try:
            assert await _turns_until_truncated(env, caller) == expected
        finally:
            await env.close_async()
