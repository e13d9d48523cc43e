"""One episode of a policy in an env, as a typed record (used by `gymfleet rollout` and tests)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gymfleet.envs.base import AgentEnv, Policy


@dataclass
class Turn:
    """One action and what the env answered."""

    action: str
    observation: str
    reward: float
    duration_s: float


@dataclass
class Episode:
    """A whole episode: the first observation, every turn, and the outcome."""

    env_id: str
    instance_id: str
    first_observation: str
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0


async def run_episode(
    env: AgentEnv,
    policy: Policy,
    *,
    env_id: str = "",
    instance_id: str | None = None,
    seed: int | None = None,
    max_turns: int = 50,
) -> Episode:
    """Resets ``env`` and lets ``policy`` act until the episode ends or ``max_turns`` pass.

    The env is not closed: the caller owns it (so that one env serves many episodes).

    Returns:
        The :class:`Episode`; ``reward`` is the sum of step rewards.
    """
    start = time.monotonic()
    options = {"instance_id": instance_id} if instance_id is not None else None
    obs, info = await env.reset_async(seed=seed, options=options)
    episode = Episode(env_id, str(info.get("instance_id", instance_id or "")), obs, info=info)
    for _ in range(max_turns):
        t0 = time.monotonic()
        action = await policy.act(obs)
        obs, reward, terminated, truncated, info = await env.step_async(action)
        episode.turns.append(Turn(action, obs, float(reward), time.monotonic() - t0))
        episode.reward += float(reward)
        if terminated or truncated:
            episode.terminated, episode.truncated = terminated, truncated
            break
    else:
        episode.truncated = True
    episode.info = info
    episode.duration_s = time.monotonic() - start
    return episode
