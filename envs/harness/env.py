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
    A command-line agent (``harness: codex``, ``envs/harness/cli_agents.py``) runs inside the
    task's Docker sandbox instead: the task image gets the agent installed (``agent_image.py``),
    the agent runs the task's instruction with its own tools, its only way out is its session's
    proxy (``session_proxy.py``), and the task's grader runs after it exits (``cli_run.py``).
Arguments (:class:`HarnessEnvConfig`): ``harness``, ``task_env``, ``task_kwargs``,
    ``command_timeout_s``, ``grading_reserve_s``, ``linger_s``, ``agent``, ``harness_config``,
    ``transcripts_dir``.
Version history: v0; CLI agents (codex) added without a version bump (Python harnesses unchanged).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from pydantic import Field, PrivateAttr, field_validator, model_validator

from gymfleet.core.strict import StrictModel
from gymfleet.envs.base import AgentEnv, Policy
from gymfleet.envs.errors import AgentInstallError
from gymfleet.envs.needs import MachineNeed
from gymfleet.envs.harness.bridge import HarnessStopped, SandboxBridge
from gymfleet.envs.harness.cli_agents import CLI_AGENTS, CliAgentConfig
from gymfleet.envs.resources import EnvResources
from gymfleet.envs.sandbox.base import SandboxSpec

if TYPE_CHECKING:
    from gymfleet.envs.harness.harnesses import HarnessFn


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
    agent: CliAgentConfig = Field(default_factory=CliAgentConfig)
    """A command-line agent's settings (model name, max turns, permission mode, flags, version);
    ignored by the Python harnesses."""
    harness_config: list[str] = Field(default_factory=list)
    """mini-swe-agent only: config specs merged in order over its own config (``mini.yaml`` or
    ``mini_textbased.yaml``), as ``mini -c`` takes them: a YAML file's path (relative to the
    working directory), a builtin config's name, or ``key.path=value``. E.g. a shorter
    ``agent.instance_template`` for a small model's context (``configs/harness/mini-text-terminal.yaml``)."""
    transcripts_dir: str | None = None
    """Folder where a command-line agent's transcript (its stdout, JSON events) is kept, one
    ``<sandbox rollout id>.jsonl`` per rollout, named by the trajectory's ``agent_transcript``;
    None: not kept."""

    @field_validator("harness")
    @classmethod
    def _known(cls, name: str) -> str:
        from gymfleet.envs.harness.harnesses import HARNESSES

        if name not in HARNESSES and name not in CLI_AGENTS:
            raise ValueError(f"unknown harness {name!r}: pick one of {sorted([*HARNESSES, *CLI_AGENTS])}")
        return name

    _harness_overrides: dict[str, Any] = PrivateAttr(default_factory=dict)
    """``harness_config`` read and merged, once, when the config is validated."""

    @model_validator(mode="after")
    def _harness_config_readable(self) -> Self:
        if self.harness_config:
            from gymfleet.envs.harness.harnesses import configured_harness
            from gymfleet.envs.harness.mini_swe_agent import config_overrides

            self._harness_overrides = config_overrides(self.harness_config)
            configured_harness(self.harness, self._harness_overrides)  # refuses a non-mini-swe-agent harness
        return self

    def harness_fn(self) -> HarnessFn | None:
        """The Python harness to run (with ``harness_config`` merged in); None for a CLI agent."""
        from gymfleet.envs.harness.harnesses import HARNESSES, configured_harness

        if self.harness_config:
            return configured_harness(self.harness, self._harness_overrides)
        return HARNESSES.get(self.harness)


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
        from gymfleet.envs.registry import make_agent_env

        super().__init__(resources)
        self.config = HarnessEnvConfig(harness=harness, task_env=task_env, task_kwargs=task_kwargs or {}, **kwargs)
        self.cli_agent = CLI_AGENTS.get(self.config.harness)
        self.harness_fn = self.config.harness_fn()
        self.task = make_agent_env(task_env, resources, **self.config.task_kwargs)
        self.noop_action = self.task.noop_action  # type: ignore[misc]
        if self.cli_agent is not None:
            if self.config.agent.tools is not None and not self.cli_agent.takes_tools:
                raise ValueError(f"agent.tools is Claude Code's --tools; {harness} takes its tools from its settings")
            if not hasattr(self.task, "spec_hook"):
                raise ValueError(f"{task_env} has no sandbox: the CLI agent {harness} needs a sandbox task")
            self.task.spec_hook = self._agent_spec  # type: ignore[attr-defined]

    @property
    def dialect(self) -> str:
        """The gateway dialect the harness speaks (its session's base URL is for this one)."""
        return self.cli_agent.dialect if self.cli_agent is not None else "openai-chat"

    async def _agent_spec(self, spec: SandboxSpec, backend: str) -> SandboxSpec:
        """The task's sandbox spec on the task image with the CLI agent installed."""
        from gymfleet.envs.harness.agent_image import ensure_agent_image

        assert self.cli_agent is not None
        if backend != "docker":
            raise AgentInstallError(f"the CLI agent {self.cli_agent.name} runs in Docker sandboxes, not {backend}: "
                                    "set task_kwargs.sandbox: docker")
        tag = await asyncio.to_thread(ensure_agent_image, self.cli_agent, spec.image, self.config.agent.version)
        return spec.model_copy(update={"image": tag})

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

        Raises:
            SandboxError: a CLI agent's proxy could not be placed in its sandbox.
        """
        if self.cli_agent is not None:
            return await self._run_cli(task, base_url, timeout_s)
        loop = asyncio.get_running_loop()
        bridge = SandboxBridge(self.task, loop, self.config.command_timeout_s)
        done: asyncio.Future[str] = loop.create_future()
        done.add_done_callback(_retrieve)  # a rollout cancelled (Ctrl-C, abort) no longer awaits it
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


    async def _run_cli(self, first_observation: str, base_url: str, timeout_s: float) -> HarnessOutcome:
        from gymfleet.envs.harness.cli_run import run_cli_agent

        assert self.cli_agent is not None
        ep = self.task.episode  # type: ignore[attr-defined]
        folder = self.config.transcripts_dir
        run = await run_cli_agent(ep.sandbox, self.cli_agent, self.config.agent, _instruction(ep.instance, first_observation),
                                  base_url, timeout_s - self.config.grading_reserve_s,
                                  Path(folder) / f"{ep.rollout_id}.jsonl" if folder else None)
        reward, info = await self.task.end_async(f"the agent {self.cli_agent.name} exited {run.exit_code}")
        return HarnessOutcome(float(reward), run.status, run.reason, f"exit {run.exit_code}", {**info, **run.info})


def _instruction(instance: Any, first_observation: str) -> str:
    """The task's own instruction (terminal: ``config.instruction``; Harbor: ``instruction``): a
    CLI agent brings its own tools and format, so gymfleet's turn-format notes are left out."""
    text = getattr(getattr(instance, "config", None), "instruction", None) or getattr(instance, "instruction", None)
    return str(text) if text else first_observation


def _retrieve(done: asyncio.Future[str]) -> None:
    """Marks the harness's outcome as seen: when the rollout was cancelled before the harness
    thread settled it, nobody awaits it, and asyncio would print "Future exception was never
    retrieved" with the thread's :class:`HarnessStopped` traceback at exit."""
    if not done.cancelled():
        done.exception()


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
