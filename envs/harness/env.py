"""`gymfleet/Harness-v0`: a task env (terminal, SWE, Harbor...) whose episode an agent harness plays.

Description:
    A rollout leases the task env's sandbox (``reset``), starts the harness with its gateway
    session's base URL (:meth:`HarnessEnv.run_harness`, driven by
    ``gymfleet.orchestrator.harness_rollout``), lets it run its own loop with each of its commands
    run as a step of the task env, then grades with the task's own grader (``end_async``), and
    releases the sandbox (``close``) on every path.
Observation / Action / Reward / Episode end:
    Through the Gymnasium API (``reset``/``step``) it is the task env itself, unchanged (its
    observations, action format, gold and no-op policies): that is what the contract test checks.
    Under a harness, the reward is the task's grade of the state the harness left.
Arguments (:class:`HarnessEnvConfig`): ``harness``, ``task_env``, ``task_kwargs``,
    ``command_timeout_s``, ``grading_reserve_s``.
Version history: v0.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, field_validator

from gymfleet.core.strict import StrictModel
from gymfleet.envs.base import AgentEnv, Policy
from gymfleet.envs.needs import MachineNeed
from gymfleet.envs.harness.bridge import HarnessStopped, SandboxBridge
from gymfleet.envs.resources import EnvResources


class HarnessEnvConfig(StrictModel):
    """Arguments of :class:`HarnessEnv`."""

    harness: str = "mini-swe-agent"
    """Which harness plays (``gymfleet.envs.harness.harnesses.HARNESSES``)."""
    task_env: str = "gymfleet/TerminalEasy-v0"
    """The registered env id of the task source."""
    task_kwargs: dict[str, Any] = Field(default_factory=dict)
    """The task env's own arguments (e.g. ``sandbox: local``)."""
    command_timeout_s: float = Field(default=600.0, gt=0)
    """Longest one harness command may block its thread, seconds."""
    grading_reserve_s: float = Field(default=60.0, ge=0)
    """Seconds of the rollout's deadline kept for grading after the harness (it stops earlier)."""
    linger_s: float = Field(default=5.0, ge=0)
    """Seconds a stopped harness thread gets to finish before it counts as left behind."""

    @field_validator("harness")
    @classmethod
    def _known(cls, name: str) -> str:
        from gymfleet.envs.harness.harnesses import HARNESSES

        if name not in HARNESSES:
            raise ValueError(f"unknown harness {name!r}: pick one of {sorted(HARNESSES)}")
        return name


@dataclass
class HarnessOutcome:
    """How a harness episode ended.

    Attributes:
        reward: the task's grade.
        status: ``ok``, ``truncated`` (the deadline hit during the policy's own command) or
            ``infra_error`` (the harness crashed, hung outside any command, or was left running).
        reason: one line, empty when ok.
        exit_status: the harness's own word (``Submitted``, ``LimitsExceeded``...).
        info: the grader's info, plus ``n_commands``.
    """

    reward: float
    status: str
    reason: str
    exit_status: str = ""
    info: dict[str, Any] = field(default_factory=dict)


class HarnessEnv(AgentEnv):
    """See the module docstring."""

    config_class = HarnessEnvConfig

    def __init__(self, harness: str = "mini-swe-agent", task_env: str = "gymfleet/TerminalEasy-v0",
                 task_kwargs: dict[str, Any] | None = None, resources: EnvResources | None = None,
                 **kwargs: Any) -> None:
        from gymfleet.envs.harness.harnesses import HARNESSES
        from gymfleet.envs.registry import make_agent_env

        super().__init__(resources)
        self.config = HarnessEnvConfig(harness=harness, task_env=task_env, task_kwargs=task_kwargs or {}, **kwargs)
        self.harness_fn = HARNESSES[harness]
        self.task = make_agent_env(task_env, resources, **self.config.task_kwargs)
        self.noop_action = self.task.noop_action  # type: ignore[misc]

    @classmethod
    def requirements(cls, kwargs: Mapping[str, Any]) -> frozenset[str]:
        from gymfleet.envs.registry import env_class

        task_env = kwargs.get("task_env", HarnessEnvConfig().task_env)
        return env_class(task_env).requirements(kwargs.get("task_kwargs") or {})

    @classmethod
    def defined_needs(cls, kwargs: Mapping[str, Any]) -> tuple[MachineNeed, ...]:
        from gymfleet.envs.registry import env_class

        task_env = kwargs.get("task_env", HarnessEnvConfig().task_env)
        return env_class(task_env).defined_needs(kwargs.get("task_kwargs") or {})

    @property
    def system_prompt(self) -> str:
        return self.task.system_prompt

    def instance_ids(self) -> list[str]:
        return self.task.instance_ids()

    def accepts_instance(self, instance_id: str) -> bool:
        return self.task.accepts_instance(instance_id)

    async def reset_async(self, *, seed: int | None = None,
                          options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.task.np_random = self.np_random  # reset(seed=...) seeds this env's generator: the task draws from it
        return await self.task.reset_async(seed=seed, options=options)

    async def step_async(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return await self.task.step_async(action)

    async def end_async(self, reason: str) -> tuple[float, dict[str, Any]]:
        return await self.task.end_async(reason)

    async def close_async(self) -> None:
        try:
            await self.task.close_async()
        finally:
            await self.close_resources()

    def gold_policy(self, instance_id: str | None = None) -> Policy:
        return self.task.gold_policy(instance_id)

    async def run_harness(self, task: str, base_url: str, timeout_s: float) -> HarnessOutcome:
        """Runs the harness on the reset episode, then grades it with the task's grader.

        Args:
            task: the instruction the harness gets (the task env's first observation).
            base_url: its gateway session's base URL.
            timeout_s: seconds left of the rollout's deadline; the harness gets them less
                ``grading_reserve_s``.

        Returns:
            The classified outcome; never raises for what the harness did (a crash, a hang).
        """
        loop = asyncio.get_running_loop()
        bridge = SandboxBridge(self.task, loop, self.config.command_timeout_s)
        done: asyncio.Future[str] = loop.create_future()
        thread = threading.Thread(target=_run_in_thread, args=(self.harness_fn, task, base_url, bridge, loop, done),
                                  name=f"harness-{self.config.harness}", daemon=True)
        thread.start()
        status, reason, exit_status = "ok", "", ""
        try:
            async with asyncio.timeout(max(1.0, timeout_s - self.config.grading_reserve_s)):
                exit_status = await asyncio.shield(done)
        except TimeoutError:
            status, reason = (("truncated", "the harness ran past the deadline in a sandbox command") if bridge.in_command
                              else ("infra_error", "the harness hung past the deadline outside any command"))
        except HarnessStopped as exc:
            exit_status = "stopped"
            reason = str(exc)
        except Exception as exc:  # the harness's own crash: not the policy's doing
            status, reason = "infra_error", f"the harness crashed: {type(exc).__name__}: {str(exc)[:300]}"
        finally:
            bridge.close()
        thread.join(0)
        await asyncio.sleep(0)
        if thread.is_alive():
            await asyncio.to_thread(thread.join, self.config.linger_s)
            if thread.is_alive() and status == "ok":
                status, reason = "infra_error", "the harness left its thread running after it was stopped"
        reward, info = bridge.reward, dict(bridge.info)
        if not bridge.ended:
            reward, info = await self.task.end_async("the harness submitted" if bridge.submitted
                                                     else f"the harness stopped ({exit_status or status})")
        return HarnessOutcome(float(reward), status, reason, exit_status, {**info, "n_commands": bridge.n_commands})


def _run_in_thread(fn: Any, task: str, base_url: str, bridge: SandboxBridge,
                   loop: asyncio.AbstractEventLoop, done: asyncio.Future[str]) -> None:
    def settle(result: str | None, exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(result or "")

    try:
        outcome: tuple[str | None, BaseException | None] = (fn(task, base_url, bridge), None)
    except BaseException as exc:
        outcome = (None, exc)
    try:
        loop.call_soon_threadsafe(settle, *outcome)
    except RuntimeError:  # the loop closed under a harness left running: nobody waits for it
        pass
