"""The env contract: a Gymnasium env whose observations and actions are text.

The async methods are the core; the sync Gymnasium methods drive them on a private event
loop thread, so a plain Gymnasium user can ``gymnasium.make("gymfleet/Terminal-v0")`` and
step it, while the orchestrator awaits ``reset_async`` / ``step_async`` directly.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from abc import ABC, abstractmethod
from collections.abc import Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import gymnasium
from gymnasium import spaces

from gymfleet.core.strict import StrictModel
from gymfleet.envs.needs import MachineNeed
from gymfleet.envs.resources import EnvResources, ResourcesConfig

T = TypeVar("T")

MAX_TEXT_CHARS = 1_000_000


class TextSpace(spaces.Space[str]):
    """Any Python ``str`` of at most ``max_length`` characters.

    Gymnasium's ``spaces.Text`` only admits a fixed charset (no spaces, newlines or
    non-ASCII), which no agent conversation fits; this space admits any string.
    """

    def __init__(self, max_length: int = MAX_TEXT_CHARS, seed: int | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = max_length

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        n = int(self.np_random.integers(0, 32))
        return "".join(chr(int(c)) for c in self.np_random.integers(32, 127, size=n))

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length


@runtime_checkable
class Policy(Protocol):
    """Something that acts in an env: a scripted gold policy, a no-op, or the model."""

    async def act(self, observation: str) -> str:
        """Called once per turn with the latest observation; returns the action text."""
        ...


class ConstantPolicy:
    """Always answers the same action (the no-op agent is ``ConstantPolicy(env.noop_action)``)."""

    def __init__(self, action: str) -> None:
        self.action = action

    async def act(self, observation: str) -> str:
        return self.action


class ScriptedPolicy:
    """Plays a fixed list of actions, then repeats the last one."""

    def __init__(self, actions: Sequence[str]) -> None:
        if not actions:
            raise ValueError("ScriptedPolicy needs at least one action")
        self.actions = list(actions)
        self.turn = 0

    async def act(self, observation: str) -> str:
        action = self.actions[min(self.turn, len(self.actions) - 1)]
        self.turn += 1
        return action


class AgentEnv(gymnasium.Env[str, str], ABC):
    """Base class of every gymfleet env.

    Subclasses implement the async hooks. Observations and actions are ``str``. The final
    reward comes from a grader the agent cannot tamper with; ``info`` carries its details.
    A malformed action is answered with an observation that says what was wrong, never an
    exception. Every subclass documents Description / Observation / Action / Reward /
    Episode end / Arguments / Version history in its docstring, as Gymnasium's envs do.

    Class attributes:
        noop_action: the action of an agent that does nothing useful (used by the no-op
            policy and the contract test; it must earn reward 0).
        artifacts_kwarg: the constructor keyword that takes a folder for pictures a person
            would look at (screenshots, renders), or None; `gymfleet rollout --artifacts-dir`
            fills it in.
        requires: what the env needs from the machine, by name: a sandbox backend's
            (``sandbox``, ``docker``, ``local``: :data:`gymfleet.envs.needs.NEEDS`) or one of
            ``machine_needs``; a run leaves out, with the reason, a task whose needs are missing.
        machine_needs: the needs this env's family defines (:class:`~gymfleet.envs.needs.MachineNeed`:
            name, what it is, the fix, the probe), e.g. the browser family's ``chromium``.
        config_class: the :class:`~gymfleet.core.strict.StrictModel` of the constructor's
            keyword arguments, checked by :meth:`check_kwargs` before any env is made (a typo
            is refused naming the nearest key); None: the arguments are not checked ahead.

    Args:
        resources: the process's shared :class:`~gymfleet.envs.resources.EnvResources`
            (sandbox pools, Chromium, harnesses); None: the env opens private ones when it first
            needs them and closes them in ``close``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    noop_action: ClassVar[str] = ""
    artifacts_kwarg: ClassVar[str | None] = None
    requires: ClassVar[frozenset[str]] = frozenset()
    machine_needs: ClassVar[tuple[MachineNeed, ...]] = ()
    config_class: ClassVar[type[StrictModel] | None] = None

    observation_space: TextSpace = TextSpace()
    action_space: TextSpace = TextSpace()

    def __init__(self, resources: EnvResources | None = None) -> None:
        super().__init__()
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._resources = resources
        self._own_resources: AsyncExitStack | None = None

    @classmethod
    def requirements(cls, kwargs: Mapping[str, Any]) -> frozenset[str]:
        """What an env made with ``kwargs`` needs (``requires``, plus what the arguments
        choose, e.g. ``sandbox: docker``). Called before any env is made."""
        return cls.requires

    @classmethod
    def defined_needs(cls, kwargs: Mapping[str, Any]) -> tuple[MachineNeed, ...]:
        """The :class:`~gymfleet.envs.needs.MachineNeed` s that :meth:`requirements` may name
        beyond the sandbox backends' (``machine_needs``; an env that plays another family's
        task adds that family's). Called before any env is made."""
        return cls.machine_needs

    @classmethod
    def check_kwargs(cls, kwargs: Mapping[str, Any]) -> None:
        """Validates ``kwargs`` (as a run config gives them) against :attr:`config_class`
        without making an env; the constructor's own object arguments (``resources``, a
        backend or host object) are left out unless the config has a field of that name.

        Raises:
            pydantic.ValidationError: an unknown key (the message names the nearest one) or a
                bad value, at any depth.
        """
        if cls.config_class is None:
            return
        fields = cls.config_class.model_fields
        own = {name for name in inspect.signature(cls.__init__).parameters if name not in fields}
        cls.config_class.model_validate({k: v for k, v in kwargs.items() if k not in own})

    # ---- resources ---------------------------------------------------------------------

    @property
    def resources(self) -> EnvResources | None:
        """The resources the env uses now: shared ones given to it, its private ones once
        opened, else None."""
        return getattr(self, "_resources", None)

    def attach_resources(self, resources: EnvResources) -> None:
        """Gives an env made without them the shared resources (``make_agent_env`` does this
        for plugins whose constructor does not take ``resources``). No effect on an env that
        already has resources."""
        if getattr(self, "_resources", None) is None:
            self._resources = resources

    async def env_resources(self) -> EnvResources:
        """The shared resources given to the env, else private ones opened now (once)."""
        if self._resources is None:
            stack = AsyncExitStack()
            self._resources = await stack.enter_async_context(self.open_private_resources())
            self._own_resources = stack
        return self._resources

    def open_private_resources(self) -> AbstractAsyncContextManager[EnvResources]:
        """The resources of an env used alone: probed lazily, and keeping no idle sandbox, so
        that an episode's sandbox closes when it ends."""
        return EnvResources.open(ResourcesConfig.private(), probe=())

    async def close_resources(self) -> None:
        """Closes private resources (shared ones are the caller's). Subclasses' ``close_async``
        calls it last. Idempotent."""
        stack, self._own_resources = self._own_resources, None
        if stack is not None:
            self._resources = None
            await stack.aclose()

    # ---- the async core, implemented by subclasses -------------------------------------

    @property
    @abstractmethod
    def system_prompt(self) -> str:
        """The instructions the agent gets once, before the first observation: the action
        format and how to finish."""

    @abstractmethod
    def instance_ids(self) -> list[str]:
        """The task instances this env can be reset to (``options={"instance_id": ...}``)."""

    def accepts_instance(self, instance_id: str) -> bool:
        """Whether ``reset`` takes ``options={"instance_id": instance_id}``: one of
        :meth:`instance_ids` by default; an env whose ids take parameters (MiniWoB's
        ``click-test-2@7``, a page seed) widens it. Configs naming instances are checked with it."""
        return instance_id in self.instance_ids()

    @abstractmethod
    async def reset_async(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Starts an episode.

        Args:
            seed: picks the instance when ``options`` names none (``instance_ids()[seed % n]``).
            options: ``{"instance_id": str}`` picks the instance; ``"max_turns": int`` is the
                caller's turn limit (the orchestrator passes its task's ``max_turns``), which an
                env may tell the agent and enforce; others ignore it.

        Returns:
            ``(observation, info)``; ``info["instance_id"]`` names the instance.

        Raises:
            KeyError: unknown ``instance_id``.
            gymfleet.envs.errors.SandboxError: the sandbox could not be started.
        """

    @abstractmethod
    async def step_async(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Applies one action.

        Returns:
            ``(observation, reward, terminated, truncated, info)``. ``terminated`` when the
            agent submitted (or the task reached its end state), ``truncated`` on the turn or
            time limit; the final reward comes with the last step.
        """

    @abstractmethod
    async def close_async(self) -> None:
        """Releases the sandbox and every other resource. Idempotent."""

    async def end_async(self, reason: str) -> tuple[float, dict[str, Any]]:
        """Called when the caller cuts the episode short (its own turn or time limit) before the
        env ended it: grades the state as it stands, as the env's own limit would.

        The default grades nothing (reward 0); envs whose reward comes from the final state
        (terminal, slides, SWE) override it. Calling it after the episode ended returns
        ``(0.0, {})``.

        Args:
            reason: why the episode is cut, for ``info``.

        Returns:
            ``(reward, info)``.
        """
        return 0.0, {"ended_by_caller": reason}

    @abstractmethod
    def gold_policy(self, instance_id: str | None = None) -> Policy:
        """A scripted policy that solves ``instance_id`` (earns reward 1). Stateless: works
        before any reset; None means the current episode's instance.

        Raises:
            KeyError: unknown ``instance_id``.
            RuntimeError: ``instance_id`` is None and no episode has started.
        """

    # ---- the sync Gymnasium API, driven on a private loop ------------------------------

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(
                target=self._loop.run_forever, name=f"{type(self).__name__}-loop", daemon=True
            )
            self._loop_thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return self._run(self.reset_async(seed=seed, options=options))

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self._run(self.step_async(action))

    def close(self) -> None:
        if self._loop is None:
            return
        try:
            self._run(self.close_async())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._loop_thread is not None:
                self._loop_thread.join(timeout=10)
            self._loop.close()
            self._loop = None
            self._loop_thread = None
