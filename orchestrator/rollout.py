"""One rollout: an env episode played by the policy, classified and recorded as a Trajectory.

``reset -> open session -> (generate -> step)* -> trajectory``, with a per-turn and a per-rollout
time limit. Every failure is classified here, at the boundary (docs/design.md, failure contract):

=====================================  ==============
what happened                          status
=====================================  ==============
env terminated the episode             ok
policy damaged its own sandbox         ok (graded as left, reason says so)
env truncated it, turn or time limit   truncated
PolicyError from the gateway           policy_error
ContextLengthError (context full)      truncated
sandbox failure (SandboxError)         infra_error  (from outside: daemon, operator, reaper)
engine failure (any gateway error)     infra_error  (metrics engine_outage when no replica was live)
any other env exception (an env bug)   env_error
cancelled (shutdown)                   aborted
=====================================  ==============

Damage inside the sandbox is the policy's, damage from outside is infrastructure
(docs/sandbox.md): a :class:`SandboxDamagedError` out of a step (``rm -rf /`` took bash, the
agent filled its disk) ends the episode there, graded on what is left by ``end_async`` (normally
0), with status ok and the damage as the reason, so that it reaches the loss; a
:class:`SandboxError` (the container removed mid-command, the daemon gone) is ``infra_error``.

The env is always closed (its sandbox released), whatever happened.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gymfleet.core.records import Message, RolloutStatus, SamplingParams, Trajectory
from gymfleet.envs.base import AgentEnv
from gymfleet.envs.episode import end_damaged
from gymfleet.core.errors import InferenceError, SandboxError
from gymfleet.envs.errors import SandboxDamagedError
from gymfleet.orchestrator.engines.errors import ContextLengthError, NoReplicaError
from gymfleet.orchestrator.errors import EngineError, PolicyError
from gymfleet.orchestrator.protocols import PolicyGateway, PolicySession
from gymfleet.orchestrator.store.codec import clean_text, json_safe

EnvFactory = Callable[[], AgentEnv]


@dataclass(frozen=True)
class RolloutRequest:
    """What to roll out, and under which limits."""

    run_id: str
    group_id: str
    rollout_id: str
    env_id: str
    instance_id: str
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_turns: int = 30
    turn_timeout_s: float = 300.0
    rollout_timeout_s: float = 1800.0
    close_timeout_s: float = 60.0
    """Seconds ``close_async`` may take (the sandbox is being released)."""


class _Failure(Exception):
    """Internal: ends the loop with a status and reason."""

    def __init__(self, status: RolloutStatus, reason: str, *, outage: bool = False) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.outage = outage
        """An infra_error explained by a known outage (no replica live): not the task's fault."""


def _describe(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}" if frame else ""
    return f"{type(exc).__name__}: {exc}{where}"


def classify_env_error(exc: Exception, phase: str) -> _Failure:
    """Sandbox failures are infrastructure; anything else the env raised is an env bug."""
    status = RolloutStatus.infra_error if isinstance(exc, SandboxError) else RolloutStatus.env_error
    return _Failure(status, f"env {phase} failed: {_describe(exc)}")


POLICY_FAILURES: dict[type[Exception], tuple[RolloutStatus, str]] = {
    ContextLengthError: (RolloutStatus.truncated, "context window full"),
    PolicyError: (RolloutStatus.policy_error, "policy"),
}
"""Gateway exceptions that are not infrastructure failures (first matching class wins)."""


def classify_policy_error(exc: Exception) -> _Failure:
    """The policy's own failures map through POLICY_FAILURES; any other gateway/engine error
    (replica down, timeout, unknown adapter, ...) is infrastructure."""
    for cls, (status, label) in POLICY_FAILURES.items():
        if isinstance(exc, cls):
            return _Failure(status, f"{label}: {_describe(exc)}")
    kind = "engine" if isinstance(exc, EngineError | InferenceError) else "gateway"
    return _Failure(RolloutStatus.infra_error, f"{kind} failed: {_describe(exc)}", outage=_is_outage(exc))


OUTAGE_METRIC = "engine_outage"
"""Set (True) in the metrics of an infra_error trajectory that a known outage explains (no live
replica: :class:`NoReplicaError` anywhere in the exception's cause chain); the scheduler does not
count those toward quarantining the task."""


def _is_outage(exc: BaseException | None) -> bool:
    while exc is not None:
        if isinstance(exc, NoReplicaError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class Rollout:
    """Plays one episode. ``await run()`` returns its trajectory; never raises, except
    ``CancelledError`` (after recording an aborted trajectory in ``trajectory``)."""

    def __init__(self, request: RolloutRequest, make_env: EnvFactory, gateway: PolicyGateway) -> None:
        self.request = request
        self.make_env = make_env
        self.gateway = gateway
        self.env: AgentEnv | None = None
        self.session: PolicySession | None = None
        self.messages: list[Message] = []
        self.trajectory: Trajectory | None = None
        self.reward = 0.0
        self.info: dict[str, Any] = {}
        self.n_turns = 0
        self.timings = {"generation_s": 0.0, "env_s": 0.0, "reset_s": 0.0}

    async def run(self) -> Trajectory:
        """Plays the episode and returns the classified trajectory."""
        req = self.request
        start = time.monotonic()
        status, reason = RolloutStatus.ok, ""
        try:
            try:
                async with asyncio.timeout(req.rollout_timeout_s):
                    status, reason = await self._play()
            except TimeoutError:
                status, reason = RolloutStatus.truncated, f"rollout exceeded rollout_timeout_s={req.rollout_timeout_s:g}"
            except _Failure as failure:
                status, reason = failure.status, failure.reason
                if failure.outage:
                    self.info[OUTAGE_METRIC] = True
            except Exception as exc:  # a bug here, not in the env: recorded, and the env still closed
                status, reason = RolloutStatus.infra_error, f"orchestrator bug: {_describe(exc)}"
        except asyncio.CancelledError:
            self.trajectory = self._finish(RolloutStatus.aborted, "cancelled: orchestrator shutting down", start)
            await self._close()
            raise
        self.trajectory = self._finish(status, reason, start)
        await self._close()
        return self.trajectory

    async def _play(self) -> tuple[RolloutStatus, str]:
        req = self.request
        t0 = time.monotonic()
        try:
            self.env = self.make_env()
            obs, info = await self.env.reset_async(options={"instance_id": req.instance_id, "max_turns": req.max_turns})
            obs, system = clean_text(obs), clean_text(self.env.system_prompt)  # env text is untrusted
        except Exception as exc:
            raise classify_env_error(exc, "reset") from exc
        finally:
            self.timings["reset_s"] = time.monotonic() - t0
        self.info = dict(info)
        self.messages = [Message("system", system), Message("user", obs)]
        try:
            self.session = self.gateway.open_session(req.rollout_id, list(self.messages))
        except Exception as exc:
            raise classify_policy_error(exc) from exc
        for turn in range(req.max_turns):
            try:
                async with asyncio.timeout(req.turn_timeout_s):
                    done = await self._turn()
            except TimeoutError:
                return await self._cut(f"turn {turn} exceeded turn_timeout_s={req.turn_timeout_s:g}")
            if done is not None:
                return done
        return await self._cut(f"reached max_turns={req.max_turns} without the episode ending")

    async def _cut(self, reason: str, damage: SandboxDamagedError | None = None) -> tuple[RolloutStatus, str]:
        """Ends the episode early: the env grades the state as it stands (``AgentEnv.end_async``).
        Cut by a limit it is truncated; ended by ``damage`` the policy did, ok (terminated), graded
        on what is left; a sandbox too damaged to grade earns 0."""
        assert self.env is not None
        t0 = time.monotonic()
        try:
            if damage is not None:
                reward, info = await end_damaged(self.env, str(damage))
            else:
                reward, info = await self.env.end_async(reason)
        except SandboxDamagedError as exc:
            reward, info = 0.0, {"grading_error": f"the sandbox could not be graded: {exc}"}
        except Exception as exc:
            raise classify_env_error(exc, "end") from exc
        finally:
            self.timings["env_s"] += time.monotonic() - t0
        self.reward += float(reward)
        self.info.update(info)
        return (RolloutStatus.truncated if damage is None else RolloutStatus.ok), reason

    async def _turn(self) -> tuple[RolloutStatus, str] | None:
        assert self.session is not None and self.env is not None
        t0 = time.monotonic()
        try:
            action = await self.session.generate(self.request.sampling)
        except Exception as exc:
            raise classify_policy_error(exc) from exc
        finally:  # counted even when the turn limit cuts the generation
            self.timings["generation_s"] += time.monotonic() - t0
        t1 = time.monotonic()
        self.messages.append(Message("assistant", action))
        damage: SandboxDamagedError | None = None
        try:
            obs, reward, terminated, truncated, info = await self.env.step_async(action)
        except SandboxDamagedError as exc:  # the policy's doing: the episode ends, graded
            damage = exc
        except Exception as exc:
            raise classify_env_error(exc, f"step {self.n_turns}") from exc
        finally:
            self.timings["env_s"] += time.monotonic() - t1
        if damage is not None:
            self.n_turns += 1
            return await self._cut(f"the policy damaged its sandbox at turn {self.n_turns - 1}: {damage}", damage)
        self.n_turns += 1
        self.reward += float(reward)
        self.info = dict(info)
        obs = clean_text(obs)  # a lone surrogate would make the tokenizer raise, the export fail
        self.messages.append(Message("user", obs))
        self.session.add_message("user", obs)
        if terminated:  # an env that ended on the policy's damage itself says so in info
            damaged = info.get("damaged")
            return RolloutStatus.ok, (f"the policy damaged its sandbox at turn {self.n_turns - 1}: {damaged}"
                                      if damaged else "")
        if truncated:
            return RolloutStatus.truncated, f"env truncated the episode after {self.n_turns} turns"
        return None

    def _finish(self, status: RolloutStatus, reason: str, start: float) -> Trajectory:
        req = self.request
        if self.session is not None:
            traj = self.session.to_trajectory(req.run_id, req.group_id, req.env_id, req.instance_id)
        else:
            traj = Trajectory(req.rollout_id, req.run_id, req.group_id, req.env_id, req.instance_id)
        traj.rollout_id = req.rollout_id
        if not traj.messages:
            traj.messages = list(self.messages)
        traj.reward = self.reward
        traj.status, traj.reason = status, reason
        traj.metrics = {**json_safe(traj.metrics), **json_safe(self.info), "n_turns": self.n_turns}
        grading_s = self.info.get("grading_s", self.info.get("volatile", {}).get("grading_s"))
        traj.timings = {**self.timings, "total_s": time.monotonic() - start,
                        **({"grading_s": float(grading_s)} if isinstance(grading_s, int | float) else {})}
        return traj

    async def _close(self) -> None:
        if self.env is None:
            return
        env, self.env = self.env, None
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(self.request.close_timeout_s):
                await env.close_async()
        except Exception as exc:  # the trajectory stands; a leaked sandbox is reaped by its expiry label
            if self.trajectory is not None:
                self.trajectory.metrics["close_error"] = _describe(exc)
        finally:
            if self.trajectory is not None:
                self.trajectory.timings["close_s"] = time.monotonic() - t0
