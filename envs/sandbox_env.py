"""SandboxEnv: the shared part of every env whose episode runs in a sandbox.

A subclass says what its instances are, which sandbox an instance needs and how to prepare it,
how to grade the end state, and the gold actions. The base does the rest: the backend (from the
run's :class:`~gymfleet.envs.resources.EnvResources`, or private ones), one sandbox per episode
leased from the warm pool and released on every path (graded, cut short, reset, closed, failed),
the action grammar (one fenced ``bash`` block or a control word,
:func:`~gymfleet.envs.actions.parse_fenced_action`), the turn limit, ``end_async`` grading and
``close``. Terminal, slides and SWE are built on it; a new sandbox env is about 80 lines (see
``tests/envs/plugin/``).

Episode flow::

    reset:  pick instance -> sandbox_spec() -> lease -> prepare() -> first observation
    step:   submit -> grade() ;  bash block -> command() ;  other word -> word() ;  else malformed()
            turn limit or over_budget() -> grade() (truncated)
    end_async(reason) -> grade() (truncated) ;  grade() is followed by the sandbox's release
    a command that finds the sandbox broken by the policy (SandboxDamagedError) -> grade()
            (terminated, info["damaged"]) ;  a grade() that finds it so -> reward 0
"""

from __future__ import annotations

import time
import uuid
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic

from typing_extensions import TypeVar  # a TypeVar with a default (PEP 696; typing has it from 3.13)

from gymfleet.core.strict import StrictModel
from gymfleet.envs.actions import Command, Word, bash_block, parse_fenced_action
from gymfleet.envs.base import AgentEnv, Policy, ScriptedPolicy
from gymfleet.envs.errors import SandboxDamagedError
from gymfleet.envs.images import ImageTags
from gymfleet.envs.info import add_volatile, merge_info
from gymfleet.envs.resources import EnvResources, ResourcesConfig, SandboxLease
from gymfleet.envs.sandbox.base import Sandbox, SandboxBackend, SandboxLabels, SandboxSpec

InstanceT = TypeVar("InstanceT")
StateT = TypeVar("StateT", default=dict[str, Any])
Step = tuple[str, float, bool, bool, dict[str, Any]]

SUBMIT = "submit"


class SandboxEnvConfig(StrictModel):
    """Arguments every sandbox env takes; a subclass's config extends it."""

    sandbox: str = "auto"
    """Sandbox backend: ``auto`` (the resources' choice: Docker when a daemon answers, else
    local), ``docker`` or ``local``."""
    run_id: str = "adhoc"
    """Labels the sandboxes of an env used alone (with shared resources, theirs)."""


@dataclass
class SandboxEpisode(Generic[InstanceT, StateT]):
    """One episode's state.

    Attributes:
        state: what a subclass keeps per episode, as its own record (``TerminalEnv``'s
            ``TerminalState``: the scratch folder, the shell, the command time used), set by its
            :meth:`SandboxEnv.prepare`; an env that declares no ``StateT`` gets an empty dict.
        caller_max_turns: the caller's turn limit (``reset`` option ``max_turns``), None if none.
    """

    instance_id: str
    instance: InstanceT
    lease: SandboxLease
    rollout_id: str
    turn: int = 0
    done: bool = False
    state: StateT = field(default_factory=dict)  # type: ignore[assignment]  # prepare() sets a family's record
    caller_max_turns: int | None = None

    @property
    def sandbox(self) -> Sandbox:
        """The episode's started sandbox."""
        return self.lease.sandbox


@dataclass(frozen=True)
class Graded:
    """How an episode ended: its reward, the last observation, and what goes in ``info``."""

    reward: float
    observation: str
    info: dict[str, Any] = field(default_factory=dict)


class SandboxEnv(AgentEnv, Generic[InstanceT, StateT]):
    """Base of sandbox-backed envs; see the module docstring. Subclasses document themselves as
    every AgentEnv does.

    Type parameters: ``InstanceT`` the instances, ``StateT`` the record of an episode's own state
    (``SandboxEnv[Task, TerminalState]``), which :meth:`prepare` puts in ``ep.state``; without
    it, ``ep.state`` is a dict.

    Class attributes:
        config_class: the pydantic model of the constructor's keyword arguments.
        words: control words besides ``submit`` (handled by :meth:`word`).
        format_help: appended to every malformed-turn reason.
        fresh_sandbox: True when the task's state is the image itself (a reset would wipe it):
            every episode starts a new sandbox, never a pooled one.
        turn_limit_note: appended to the last observation at the turn limit.

    Args:
        sandbox: a backend name, or a ``SandboxBackend`` object to use unpooled (tests).
        resources: the run's shared resources; None: private ones (see AgentEnv).
        **kwargs: the fields of ``config_class``.
    """

    requires: ClassVar[frozenset[str]] = frozenset({"sandbox"})
    noop_action: ClassVar[str] = SUBMIT
    config_class: ClassVar[type[SandboxEnvConfig]] = SandboxEnvConfig
    words: ClassVar[tuple[str, ...]] = ()
    format_help: ClassVar[str] = f"Reply with exactly one ```bash block, or `{SUBMIT}` alone to finish."
    fresh_sandbox: ClassVar[bool] = False
    turn_limit_note: ClassVar[str] = "Turn limit ({limit}) reached."
    submitted_note: ClassVar[str] = "You submitted."

    def __init__(self, sandbox: str | SandboxBackend = "auto",
                 resources: EnvResources | None = None, **kwargs: Any) -> None:
        if not isinstance(sandbox, str) and resources is not None:
            raise ValueError("pass either a sandbox backend object or resources, not both")
        super().__init__(resources)
        self._backend_object = None if isinstance(sandbox, str) else sandbox
        self.config = self.config_class(sandbox=sandbox if isinstance(sandbox, str) else sandbox.name,
                                        **kwargs)
        self._episode: SandboxEpisode[InstanceT, StateT] | None = None
        self.spec_hook: Callable[[SandboxSpec, str], Awaitable[SandboxSpec]] | None = None
        """Called with each episode's spec and backend before the lease: the spec it returns is
        leased instead (Harness-v0 swaps in the task image with a CLI agent installed)."""

    @classmethod
    def requirements(cls, kwargs: Mapping[str, Any]) -> frozenset[str]:
        """``requires``, plus the backend the arguments name (``sandbox: docker``)."""
        backend = kwargs.get("sandbox", "auto")
        named = {backend} if backend in ("docker", "local") else set()
        return cls.requires | named

    # ---- what a subclass provides -------------------------------------------------------

    @abstractmethod
    def instances(self) -> Mapping[str, InstanceT]:
        """The instances by id (made once; called often)."""

    @abstractmethod
    async def sandbox_spec(self, instance: InstanceT, backend: str) -> SandboxSpec:
        """The sandbox ``instance`` runs in on ``backend`` (see :meth:`image`)."""

    @abstractmethod
    async def prepare(self, ep: SandboxEpisode[InstanceT, StateT]) -> tuple[str, dict[str, Any]]:
        """Sets the leased sandbox up for the episode and puts the env's state record in
        ``ep.state``; returns the first observation and extra ``info``. Raising releases
        (discards) the sandbox."""

    @abstractmethod
    async def grade(self, ep: SandboxEpisode[InstanceT, StateT], why: str) -> Graded:
        """Grades the end state; ``why`` says how the episode ended (for the observation).
        The sandbox is released right after (a subclass may release it earlier)."""

    @abstractmethod
    def gold_actions(self, instance: InstanceT) -> list[str]:
        """The actions of a scripted solution of ``instance`` (reward 1)."""

    # ---- what a subclass may change ------------------------------------------------------

    def max_turns(self, ep: SandboxEpisode[InstanceT, StateT]) -> int | None:
        """The env's own turn limit for this episode (its task's); None: no limit of its own.
        The limit in force is :meth:`turn_limit` (this or the caller's, whichever is lower)."""
        return None

    def turn_limit(self, ep: SandboxEpisode[InstanceT, StateT]) -> int | None:
        """Turns after which the episode is graded and truncated: the lower of the env's own
        limit (:meth:`max_turns`) and the caller's (``reset`` option ``max_turns``, a run's task);
        what the agent is told. None: neither sets one."""
        limits = [n for n in (self.max_turns(ep), ep.caller_max_turns) if n is not None]
        return min(limits) if limits else None

    def over_budget(self, ep: SandboxEpisode[InstanceT, StateT]) -> str | None:
        """Checked after each turn: why the episode must end now (a time budget), or None."""
        return None

    def step_info(self, ep: SandboxEpisode[InstanceT, StateT]) -> dict[str, Any]:
        """The ``info`` every step starts from."""
        return {"instance_id": ep.instance_id, "turn": ep.turn}

    async def command(self, ep: SandboxEpisode[InstanceT, StateT], script: str, info: dict[str, Any]) -> str:
        """Runs the agent's bash block; returns the observation (and fills ``info``)."""
        result = await ep.sandbox.exec(script, timeout_s=60.0)
        info.update(exit_code=result.exit_code, timed_out=result.timed_out)
        return f"exit code {result.exit_code}\n{result.stdout}{result.stderr}"

    async def word(self, ep: SandboxEpisode[InstanceT, StateT], word: str, info: dict[str, Any]) -> str:
        """Handles a control word of ``words``; returns the observation."""
        raise NotImplementedError(f"{type(self).__name__} lists {word!r} in words but does not handle it")

    def malformed(self, ep: SandboxEpisode[InstanceT, StateT], reason: str) -> str:
        """The observation after a turn that broke the format."""
        return reason

    # ---- helpers for subclasses -------------------------------------------------------------

    async def image(self, name: str, backend: str) -> str:
        """The Docker image of ``images/<name>`` on ``backend``: built once per process when
        missing (content-hash tag) on Docker; a plain name elsewhere. A name with ``:`` is used
        as given."""
        if ":" in name:
            return name
        if backend != "docker":
            return f"gymfleet/{name}:latest"
        return await (await self.env_resources()).get(ImageTags).tag(name)

    @property
    def episode(self) -> SandboxEpisode[InstanceT, StateT] | None:
        """The episode in progress (or just ended), else None."""
        return self._episode

    # ---- the AgentEnv contract -----------------------------------------------------------

    def instance_ids(self) -> list[str]:
        return list(self.instances())

    def instance(self, instance_id: str) -> InstanceT:
        """The instance ``instance_id``.

        Raises:
            KeyError: unknown id (the message lists the known ones).
        """
        found = self.instances()
        if instance_id not in found:
            raise KeyError(f"unknown {type(self).__name__} instance {instance_id!r}; known: "
                           f"{', '.join(list(found)[:20])}")
        return found[instance_id]

    def gold_policy(self, instance_id: str | None = None) -> Policy:
        if instance_id is None:
            if self._episode is None:
                raise RuntimeError(f"{type(self).__name__}.gold_policy() without an instance id "
                                   "needs an episode: call reset() first, or pass the instance id")
            instance_id = self._episode.instance_id
        return ScriptedPolicy(self.gold_actions(self.instance(instance_id)))

    async def reset_async(self, *, seed: int | None = None,
                          options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        await self._end_episode()
        instance_id = self._pick(seed, options)
        instance = self.instance(instance_id)
        resources = await self.env_resources()
        backend = await resources.backend_name(self.config.sandbox)
        spec = await self.sandbox_spec(instance, backend)
        if self.spec_hook is not None:
            spec = await self.spec_hook(spec, backend)
        rollout_id = uuid.uuid4().hex[:12]
        started = time.monotonic()
        lease = await resources.lease(spec, backend=backend, fresh=self.fresh_sandbox,
                                      labels=SandboxLabels(run_id=resources.run_id, rollout_id=rollout_id))
        acquire_s = time.monotonic() - started
        ep: SandboxEpisode[InstanceT, StateT] = SandboxEpisode(instance_id, instance, lease, rollout_id)
        if options and options.get("max_turns") is not None:  # the caller's turn limit (a run's task)
            ep.caller_max_turns = int(options["max_turns"])
        try:
            observation, extra = await self.prepare(ep)
        except BaseException:
            await lease.release(discard=True)
            raise
        self._episode = ep
        info = merge_info({"instance_id": instance_id}, extra)
        info.update(sandbox=lease.backend, isolated=lease.sandbox.isolated)
        return observation, add_volatile(info, rollout_id=rollout_id, sandbox_acquire_s=round(acquire_s, 6))

    async def step_async(self, action: str) -> Step:
        ep = self._episode
        if ep is None or ep.done:
            raise RuntimeError(f"{type(self).__name__}.step called without an episode in progress: "
                               "call reset() first")
        ep.turn += 1
        info = self.step_info(ep)
        parsed = parse_fenced_action(action, (SUBMIT, *self.words), self.format_help)
        if isinstance(parsed, Word) and parsed.word == SUBMIT:
            return await self._finish(ep, self.submitted_note, info, truncated=False)
        try:
            if isinstance(parsed, Command):
                observation = await self.command(ep, parsed.script, info)
            elif isinstance(parsed, Word):
                observation = await self.word(ep, parsed.word, info)
        except SandboxDamagedError as exc:  # the policy broke its sandbox: the episode ends, graded
            info["damaged"] = str(exc)
            return await self._finish(ep, f"The sandbox can no longer run commands: {exc}", info, truncated=False)
        if not isinstance(parsed, Command | Word):
            info["malformed"] = parsed.reason
            observation = self.malformed(ep, parsed.reason)
        limit = self.turn_limit(ep)
        if limit is not None and ep.turn >= limit:
            why = f"{observation}\n\n{self.turn_limit_note.format(limit=limit)}"
            return await self._finish(ep, why, info, truncated=True)
        if (over := self.over_budget(ep)) is not None:
            return await self._finish(ep, f"{observation}\n\n{over}", info, truncated=True)
        return observation, 0.0, False, False, info

    async def end_async(self, reason: str) -> tuple[float, dict[str, Any]]:
        """Grades the end state now (the caller's limit came first), as the env's own limit does."""
        ep = self._episode
        if ep is None or ep.done:
            return 0.0, {}
        info = {**self.step_info(ep), "ended_by_caller": reason}
        _, reward, _, _, info = await self._finish(ep, reason, info, truncated=True)
        return reward, info

    async def close_async(self) -> None:
        await self._end_episode()
        await self.close_resources()

    def open_private_resources(self) -> AbstractAsyncContextManager[EnvResources]:
        given = {self._backend_object.name: self._backend_object} if self._backend_object else {}
        return EnvResources.open(ResourcesConfig.private(), run_id=self.config.run_id,
                                 backends=given, probe=())

    # ---- internals ---------------------------------------------------------------------------

    def _pick(self, seed: int | None, options: dict[str, Any] | None) -> str:
        if options and options.get("instance_id") is not None:
            return str(options["instance_id"])
        ids = self.instance_ids()
        index = seed if seed is not None else int(self.np_random.integers(len(ids)))
        return ids[index % len(ids)]

    async def _finish(self, ep: SandboxEpisode[InstanceT, StateT], why: str, info: dict[str, Any], *,
                      truncated: bool) -> Step:
        failed = True
        try:
            graded = await self.grade(ep, why)
            failed = False
        except SandboxDamagedError as exc:  # too damaged (by the policy) to grade: 0
            graded = Graded(0.0, f"{why}\n\nNothing could be graded: {exc}",
                            {"grading_error": f"the sandbox could not be graded: {exc}"})
        finally:
            ep.done = True
            await ep.lease.release(discard=failed)
        merge_info(info, graded.info)
        return graded.observation, graded.reward, not truncated, truncated, info

    async def _end_episode(self) -> None:
        ep, self._episode = self._episode, None
        if ep is not None:
            await ep.lease.release()  # idempotent: a graded episode's sandbox is released already


__all__ = ["Graded", "SandboxEnv", "SandboxEnvConfig", "SandboxEpisode", "bash_block"]
