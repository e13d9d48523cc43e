"""One episode of a policy in an env, as a typed record (used by `gymfleet rollout` and tests)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gymfleet.envs.base import AgentEnv, Policy
from gymfleet.envs.errors import SandboxDamagedError


async def end_damaged(env: AgentEnv, why: str) -> tuple[float, dict[str, Any]]:
    """Ends an episode whose sandbox the policy damaged (``SandboxDamagedError`` out of a step):
    the env grades what is left (``end_async``); a sandbox too broken to grade earns 0.

    Returns:
        ``(reward, info)``, ``info["damaged"]`` saying why.
    """
    try:
        reward, info = await env.end_async(f"the policy damaged its sandbox: {why}")
    except SandboxDamagedError as exc:
        reward, info = 0.0, {"grading_error": f"the sandbox could not be graded: {exc}"}
    return float(reward), {**info, "damaged": why}


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

    A step that raises :class:`SandboxDamagedError` (the policy broke its own sandbox) ends the
    episode, terminated, graded on what is left (:func:`end_damaged`).

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
        try:
            obs, reward, terminated, truncated, info = await env.step_async(action)
        except SandboxDamagedError as exc:  # the policy broke its sandbox: graded as it is left
            obs, reward, info = f"The episode is over: {exc}", *await end_damaged(env, str(exc))
            terminated, truncated = True, False
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
