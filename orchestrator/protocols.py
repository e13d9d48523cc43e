"""The seams the orchestrator swaps: engines, the policy gateway seen by a rollout, the store.

Each method's docstring says when it is called. Implementations live beside their noun
(``engines/``, ``gateway.py``, ``store/``); tests use fakes implementing these Protocols.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gymfleet.core.records import Generation, Message, SamplingParams, Trajectory

if TYPE_CHECKING:
    from gymfleet.orchestrator.store.workqueue import GroupSpec, SampleClaim


@runtime_checkable
class Engine(Protocol):
    """One inference replica (in-process or behind HTTP)."""

    name: str

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        adapter: str | None = None,
        routing_key: str | None = None,
    ) -> Generation:
        """Called once per assistant turn. ``prompt_ids`` is the whole conversation so far;
        ``routing_key`` (the rollout id) lets the replica reuse that session's KV cache;
        ``adapter`` names a loaded adapter (None = base model)."""
        ...

    async def load_adapter(self, name: str, path: str) -> None:
        """Called when a new adapter version is published (broadcast to every replica)."""
        ...

    async def unload_adapter(self, name: str) -> None:
        """Called when a version is retired, or rolled back after a failed broadcast."""
        ...

    async def health(self) -> bool:
        """Called by the router's health checks; False or an exception marks the replica dead."""
        ...


@runtime_checkable
class PolicySession(Protocol):
    """The conversation of one rollout, kept as token ids (TITO): what a rollout talks to."""

    rollout_id: str

    async def generate(self, sampling: SamplingParams) -> str:
        """Called once per agent turn: samples the assistant's reply to the conversation so far,
        appends its tokens (loss mask 1, logprobs, version) and returns its text."""
        ...

    def add_message(self, role: str, content: str) -> None:
        """Called with each environment observation: appends its tokens (loss mask 0)."""
        ...

    def to_trajectory(self, run_id: str, group_id: str, env_id: str, instance_id: str) -> Trajectory:
        """Called once when the rollout ends: the token-exact record (reward filled by the caller)."""
        ...


@runtime_checkable
class PolicyGateway(Protocol):
    """Opens policy sessions; owns tokenizer, chat template and routing to engines."""

    def open_session(self, rollout_id: str, messages: list[Message]) -> PolicySession:
        """Called at the start of every rollout with the system prompt and first observation."""
        ...

    @property
    def policy_version(self) -> int:
        """The newest adapter version the gateway serves (0 = base model)."""
        ...


@runtime_checkable
class SampleLeases(Protocol):
    """The store as a scheduler's claimer sees it: leased batches of a run's samples
    (``TrajectoryStore`` implements it over SQL, ``store/leases.py``)."""

    async def claim_samples(
        self, run_id: str, task: str, owner: str, n: int, lease_s: float,
        next_groups: Callable[[int], list[GroupSpec]] | None = None, requeue: bool = True,
    ) -> SampleClaim:
        """Called when the scheduler picked a task and holds none of its samples: leases up to
        ``n`` of them to ``owner`` for ``lease_s`` seconds, creating groups from ``next_groups``
        (called with the number of samples still wanted) when short; with ``requeue``, first
        requeues the run's running samples whose lease ran out."""
        ...

    async def renew_leases(self, run_id: str, owner: str, lease_s: float) -> int:
        """Called by the heartbeat every ``lease_s / 3`` seconds: extends what ``owner`` holds."""
        ...

    async def release_leases(self, run_id: str, owner: str) -> int:
        """Called once at the end of a run: gives back the samples ``owner`` holds unstarted."""
        ...
