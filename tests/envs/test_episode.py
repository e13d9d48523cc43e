"""run_episode (``gymfleet rollout``): a policy that breaks its sandbox ends its episode, graded."""

from __future__ import annotations

from gymfleet.envs.base import ConstantPolicy
from gymfleet.envs.episode import run_episode
from tests.orchestrator.fakes import DamagedSandboxEnv


async def test_damage_ends_the_episode_graded_on_what_is_left() -> None:
    env = DamagedSandboxEnv(left_reward=0.5)
    episode = await run_episode(env, ConstantPolicy("rm -rf /"), instance_id="w000")
    assert episode.terminated and not episode.truncated and len(episode.turns) == 1
    assert episode.reward == 0.5 and "bash not found" in episode.info["damaged"]
    assert env.ended and "damaged its sandbox" in env.ended[0]
    assert "The episode is over" in episode.turns[0].observation


async def test_an_ungradable_sandbox_earns_zero() -> None:
    episode = await run_episode(DamagedSandboxEnv(left_reward=None), ConstantPolicy("rm -rf /"), instance_id="w000")
    assert episode.terminated and episode.reward == 0.0 and "grading_error" in episode.info
