"""One rollout's outcome is classified at the boundary, and its env is always closed."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gymfleet.core.records import RolloutStatus
from gymfleet.orchestrator.engines.errors import ContextLengthError, NoReplicaError
from gymfleet.orchestrator.errors import EngineError, PolicyError
from gymfleet.orchestrator.rollout import Rollout, RolloutRequest
from tests.orchestrator.fakes import BrokenSandboxEnv, BuggyEnv, NeverEndsEnv, ScriptedGateway, SlowEchoEnv


def request(**limits) -> RolloutRequest:
    return RolloutRequest("run", "run/g", "run/g/0/a1", "gymfleet-test/SlowEcho-v0", "w001", **limits)


async def play(env_cls=SlowEchoEnv, gateway: ScriptedGateway | None = None, env_kwargs=None, **limits):
    envs = []

    def make():
        envs.append(env_cls(**(env_kwargs or {})))
        return envs[-1]

    traj = await Rollout(request(**limits), make, gateway or ScriptedGateway()).run()
    assert all(e.closed for e in envs)
    return traj


async def test_ok_rollout_is_token_exact_and_readable() -> None:
    traj = await play(env_kwargs={"turns": 2})
    assert traj.status is RolloutStatus.ok and traj.reward == 1.0 and traj.reason == ""
    assert [m.role for m in traj.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    text = "".join(chr(t) for t in traj.token_ids)
    assert text == "".join(m.content for m in traj.messages)
    generated = "".join(chr(t) for t, m in zip(traj.token_ids, traj.loss_mask) if m)
    assert generated == "w001w001"
    assert np.all(traj.versions[traj.loss_mask == 0] == -1)
    assert traj.metrics["n_turns"] == 2 and traj.timings["total_s"] >= traj.timings["env_s"]


@pytest.mark.parametrize(
    ("env_cls", "gateway", "limits", "status", "reason"),
    [
        (NeverEndsEnv, None, {"max_turns": 3}, RolloutStatus.truncated, "max_turns=3"),
        (SlowEchoEnv, ScriptedGateway(delay_s=5), {"turn_timeout_s": 0.05}, RolloutStatus.truncated, "turn_timeout_s"),
        (NeverEndsEnv, None, {"rollout_timeout_s": 0.1, "max_turns": 10**6}, RolloutStatus.truncated, "rollout_timeout_s"),
        (BrokenSandboxEnv, None, {}, RolloutStatus.infra_error, "SandboxStartError"),
        (BuggyEnv, None, {}, RolloutStatus.env_error, "grader crashed"),
        (SlowEchoEnv, ScriptedGateway(error=EngineError("replica down")), {}, RolloutStatus.infra_error, "engine failed"),
        (SlowEchoEnv, ScriptedGateway(error=RuntimeError("bug")), {}, RolloutStatus.infra_error, "gateway failed"),
        (SlowEchoEnv, ScriptedGateway(error=PolicyError("refused")), {}, RolloutStatus.policy_error, "refused"),
        (SlowEchoEnv, ScriptedGateway(error=ContextLengthError("2049 > 2048")), {}, RolloutStatus.truncated,
         "context window full"),
        (SlowEchoEnv, ScriptedGateway(error=NoReplicaError("all dead")), {}, RolloutStatus.infra_error, "engine failed"),
    ],
    ids=["turn-limit", "turn-timeout", "rollout-timeout", "sandbox", "env-bug", "engine", "gateway", "policy",
         "context", "no-replica"],
)
async def test_failures_are_classified(env_cls, gateway, limits, status, reason) -> None:
    traj = await play(env_cls, gateway, {"step_delay_s": 0.001}, **limits)
    assert traj.status is status
    assert reason in traj.reason


async def test_cancelled_rollout_is_aborted_and_releases_its_env() -> None:
    env = SlowEchoEnv(step_delay_s=10)
    rollout = Rollout(request(), lambda: env, ScriptedGateway())
    task = asyncio.create_task(rollout.run())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert env.closed
    assert rollout.trajectory is not None and rollout.trajectory.status is RolloutStatus.aborted
    assert rollout.trajectory.n_generated_tokens == 4  # the reply before the cancelled step


class GradedAtTheEndEnv(NeverEndsEnv):
    """Never ends by itself; when cut short, grades the state as it stands (reward 1)."""

    ended: list[str] = []

    async def end_async(self, reason: str):
        self.ended.append(reason)
        return 1.0, {"graded": True}


async def test_a_rollout_cut_by_the_turn_limit_is_graded_by_the_env() -> None:
    GradedAtTheEndEnv.ended = []
    traj = await play(GradedAtTheEndEnv, max_turns=2)
    assert traj.status is RolloutStatus.truncated and "max_turns=2" in traj.reason
    assert traj.reward == 1.0 and GradedAtTheEndEnv.ended == [traj.reason]
    # The default end_async grades nothing.
    assert (await play(NeverEndsEnv, max_turns=2)).reward == 0.0
