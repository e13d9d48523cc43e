"""Fakes implementing the orchestrator's Protocols: a scripted policy gateway and test envs.

Importing this module registers the test envs with Gymnasium, so a run config can name them as
``tests.orchestrator.fakes:gymfleet-test/SlowEcho-v0`` (Gymnasium's ``module:env-id``).
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import gymnasium
import numpy as np

from gymfleet.core.records import Message, SamplingParams, Trajectory
from gymfleet.envs.errors import SandboxDamagedError, SandboxStartError
from gymfleet.orchestrator.engines.errors import AdapterPublishError
from tests.fakes import EchoEnv

Reply = Callable[[list[Message]], str]


def say_the_word(messages: list[Message]) -> str:
    """Answers EchoEnv: the word quoted in the latest user message."""
    match = re.search(r"'([^']*)'", messages[-1].content)
    return match.group(1) if match else "?"


class ScriptedSession:
    """A PolicySession whose token ids are the characters' code points (TITO by construction)."""

    def __init__(self, gateway: ScriptedGateway, rollout_id: str, messages: list[Message]) -> None:
        self.gateway = gateway
        self.rollout_id = rollout_id
        self.messages = list(messages)
        self.tokens: list[tuple[int, int, float, int]] = []  # (id, mask, logprob, version)
        for m in messages:
            self._append(m.content, generated=False)

    def _append(self, text: str, *, generated: bool) -> None:
        version = self.gateway.policy_version
        self.tokens += [(ord(c), int(generated), -0.5 if generated else 0.0, version if generated else -1)
                        for c in text]

    async def generate(self, sampling: SamplingParams) -> str:
        gw = self.gateway
        gw.n_generate += 1
        if gw.delay_s:
            await asyncio.sleep(gw.delay_s)
        if gw.error is not None:
            raise gw.error
        text = gw.reply(self.messages)[: sampling.max_new_tokens]
        self.messages.append(Message("assistant", text))
        self._append(text, generated=True)
        return text

    def add_message(self, role: str, content: str) -> None:
        self.messages.append(Message(role, content))
        self._append(content, generated=False)

    def to_trajectory(self, run_id: str, group_id: str, env_id: str, instance_id: str) -> Trajectory:
        cols = list(zip(*self.tokens, strict=True)) if self.tokens else [(), (), (), ()]
        return Trajectory(
            self.rollout_id, run_id, group_id, env_id, instance_id,
            token_ids=np.array(cols[0], np.int32), loss_mask=np.array(cols[1], np.uint8),
            logprobs=np.array(cols[2], np.float32), versions=np.array(cols[3], np.int32),
            messages=list(self.messages),
        )


class ScriptedGateway:
    """A PolicyGateway with scripted replies, an optional delay per turn, and injectable failures.

    Args:
        reply: maps the conversation so far to the reply text.
        delay_s: seconds each ``generate`` sleeps.
        error: raised by every ``generate`` when set.
    """

    def __init__(self, reply: Reply = say_the_word, delay_s: float = 0.0, error: Exception | None = None) -> None:
        self.reply = reply
        self.delay_s = delay_s
        self.error = error
        self.version = 0
        self.n_sessions = 0
        self.n_generate = 0

    def open_session(self, rollout_id: str, messages: list[Message]) -> ScriptedSession:
        self.n_sessions += 1
        return ScriptedSession(self, rollout_id, messages)

    @property
    def policy_version(self) -> int:
        return self.version

    async def publish_adapter(self, version: int, path: str) -> str:
        """Serves ``version`` to later turns at once (nothing is loaded: the replies are scripted)."""
        self.version = version
        return f"run-v{version:06d}"


class AdapterRefusingGateway(ScriptedGateway):
    """A gateway whose every replica fails to load any adapter (as replicas that time out would)."""

    async def publish_adapter(self, version: int, path: str) -> str:
        raise AdapterPublishError(
            f"adapter v{version} failed to load on every replica (r0: no answer within 30 s); "
            "v0 keeps being served")


def adapter_refusing_gateway() -> AdapterRefusingGateway:
    """The ``policy: {kind: import, factory: tests.orchestrator.fakes:adapter_refusing_gateway}`` builder."""
    return AdapterRefusingGateway(say_the_word)


@asynccontextmanager
async def hanging_adapter_gateway(adapter_timeout_s: float = 0.3) -> AsyncIterator[Any]:
    """The ``policy: {kind: import, factory: tests.orchestrator.fakes:hanging_adapter_gateway}`` builder:
    the real TITO gateway over the real router of one scripted replica whose adapter loads never
    answer (a replica stuck loading), so every publish times out after ``adapter_timeout_s``."""
    from gymfleet.core.models import load_tokenizer
    from gymfleet.orchestrator.gateway import Gateway
    from gymfleet.orchestrator.router import Router, RouterConfig
    from tests.orchestrator.fake_engine import FakeEngine

    engine = FakeEngine("stuck-0")
    engine.hang_load = True
    async with Router([engine], RouterConfig(adapter_timeout_s=adapter_timeout_s)) as router:
        yield Gateway(load_tokenizer(), router)


def echo_gateway(delay_s: float = 0.0) -> ScriptedGateway:
    """The ``policy: {kind: import, factory: tests.orchestrator.fakes:echo_gateway}`` builder."""
    return ScriptedGateway(say_the_word, delay_s=delay_s)


class SlowEchoEnv(EchoEnv):
    """EchoEnv with many instances and a delay per reset and step; counts open envs.

    Arguments: ``n_instances`` (words ``w000``...), ``step_delay_s``, ``turns`` (steps before
    the episode terminates; the reward comes with the last one).
    """

    open_envs: int = 0  # class-level tally, read by tests to check every env was closed

    def __init__(self, n_instances: int = 8, step_delay_s: float = 0.0, turns: int = 1) -> None:
        super().__init__(tuple(f"w{i:03d}" for i in range(n_instances)))
        self.step_delay_s = step_delay_s
        self.turns = turns
        self.n_steps = 0
        type(self).open_envs += 1

    async def reset_async(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.n_steps = 0
        return await super().reset_async(seed=seed, options=options)

    async def step_async(self, action: str):
        await asyncio.sleep(self.step_delay_s)
        self.n_steps += 1
        if self.n_steps < self.turns:
            return f"Again: say {self.word!r}.", 0.0, False, False, {"instance_id": self.word}
        return await super().step_async(action)

    async def close_async(self) -> None:
        if not self.closed:
            type(self).open_envs -= 1
        await super().close_async()


class BrokenSandboxEnv(SlowEchoEnv):
    """Every reset fails like a sandbox that cannot start (an infrastructure failure)."""

    async def reset_async(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        raise SandboxStartError("image gymfleet/missing:latest not found: run `gymfleet images build`")


class BuggyEnv(SlowEchoEnv):
    """Every step raises, like an env with a bug."""

    async def step_async(self, action: str):
        raise ValueError("grader crashed")


class DamagedSandboxEnv(SlowEchoEnv):
    """Every step breaks the sandbox, as ``rm -rf /`` would; grading what is left gives
    ``left_reward`` (``None``: grading fails on the broken sandbox too)."""

    def __init__(self, left_reward: float | None = 0.25, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.left_reward = left_reward
        self.ended: list[str] = []

    async def step_async(self, action: str):
        raise SandboxDamagedError("sandbox x can no longer start a command: bash not found")

    async def end_async(self, reason: str) -> tuple[float, dict[str, Any]]:
        self.ended.append(reason)
        if self.left_reward is None:
            raise SandboxDamagedError("sandbox x can no longer start a command: bash not found")
        return self.left_reward, {"graded": True}


class NeverEndsEnv(SlowEchoEnv):
    """Never terminates (the turn limit must cut it)."""

    async def step_async(self, action: str):
        await asyncio.sleep(self.step_delay_s)
        return "keep going", 0.0, False, False, {}


class CoinEnv(SlowEchoEnv):
    """Reward 1 with probability ``p_solve`` whatever the agent says (groups disagree)."""

    _made = itertools.count()

    def __init__(self, p_solve: float = 0.5, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.p_solve = p_solve
        # A distinct stream per env made (one env per rollout): seeding by the number of envs
        # open at the time repeated seeds, so whole groups drew the same rewards.
        self.rng = np.random.default_rng([seed, next(CoinEnv._made)])

    async def step_async(self, action: str):
        await asyncio.sleep(self.step_delay_s)
        return "done", float(self.rng.random() < self.p_solve), True, False, {}


class LoneSurrogateEnv(SlowEchoEnv):
    """Page text as a hostile page serves it: a lone surrogate (not encodable as UTF-8) in every
    observation and in the step's info."""

    async def reset_async(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = await super().reset_async(seed=seed, options=options)
        return obs + " page: \ud800!", info

    async def step_async(self, action: str):
        obs, reward, terminated, truncated, info = await super().step_async(action)
        return obs + " \udfff", reward, terminated, truncated, {**info, "title": "x\ud800y"}


ENVS = {
    "gymfleet-test/Coin-v0": CoinEnv,
    "gymfleet-test/SlowEcho-v0": SlowEchoEnv,
    "gymfleet-test/BrokenSandbox-v0": BrokenSandboxEnv,
    "gymfleet-test/Buggy-v0": BuggyEnv,
    "gymfleet-test/NeverEnds-v0": NeverEndsEnv,
    "gymfleet-test/LoneSurrogate-v0": LoneSurrogateEnv,
}


def register_test_envs() -> None:
    """Registers the test envs with Gymnasium (idempotent)."""
    for env_id, cls in ENVS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=f"{__name__}:{cls.__name__}", disable_env_checker=True)


register_test_envs()
