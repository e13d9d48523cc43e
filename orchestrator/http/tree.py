"""A harness session as a tree of token-exact calls, and the registry of open sessions by token.

A harness sends its whole history with every call. The tree finds the earlier call whose prompt
plus completion (as the harness would echo it back, ``tools.canonical``) is the longest prefix of
the new history and continues that call's token ids (a fork of its gateway
:class:`~gymfleet.orchestrator.gateway.Session`): the sampled ids are reused, never re-tokenised,
and only the new messages are tokenised (loss mask 0). A history that extends no earlier call (a
harness that edited or summarised it) starts a new root; one that extends a call which already has
a continuation adds a sibling. Both are branches. Each leaf is one trajectory.

Counts kept per session (``metrics`` of its trajectories): ``calls``; ``continued`` (extended a
leaf); ``branched`` (a new root after the first, or a second child); ``retokenised`` (the new
messages hold an assistant turn that the gateway sampled earlier but whose ids could not be reused
where it now stands); ``lost`` (calls that failed or timed out on the gateway's or engine's side);
``abandoned`` (calls whose client disconnected before the answer). A session with a lost call is
not trained on (status ``infra_error``, the reason names the call). An abandoned call is the same,
unless the caller says the client runs where the policy's commands run (a CLI agent in its
sandbox, which the policy can kill): then the session's answered calls are graded and trained on,
and killing the agent mid-call dodges nothing.

A session opened with its rollout's sampling (the run's ``sampling`` block, carried by its task's ``sampling``) samples every call
with it, whatever the harness asked: the temperature, top-p and seed of the trained policy are the
run's, and the harness's ``max_tokens`` is honoured only below the run's ``max_new_tokens``.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from gymfleet.core.records import Generation, Message, RolloutStatus, SamplingParams, Trajectory
from gymfleet.orchestrator.gateway import Gateway, Session
from gymfleet.orchestrator.http.errors import CallFailedError, ClosedSessionError, UnknownSessionError


@dataclass
class CallNode:
    """One call: the history it answered plus its reply (``key``) and the session after it."""

    key: tuple[Message, ...]
    session: Session
    n_children: int = 0


@dataclass
class CallOutcome:
    """A call's reply: the decoded completion and the engine's generation."""

    text: str
    generation: Generation
    kind: str
    """How the call attached to the tree: ``root``, ``continued`` or ``branched``."""


@dataclass
class HarnessSession:
    """One rollout's session: the tree of its calls (all in one event loop, so no lock is needed)."""

    gateway: Gateway
    rollout_id: str
    token: str
    nodes: list[CallNode] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    """Calls whose client disconnected before the answer (the reasons)."""
    closed: bool = False
    sampling: SamplingParams | None = None
    """The rollout's sampling (None: each call's own, as the harness sent it)."""

    async def call(self, messages: list[Message], sampling: SamplingParams,
                   canonical_reply: Callable[[str], Message], timeout_s: float) -> CallOutcome:
        """Samples the reply to ``messages`` on the right branch of the tree.

        Args:
            messages: the history as chat-template messages (tools rendered in).
            sampling: the call's sampling settings.
            canonical_reply: the message the harness will echo back for a completion text.
            timeout_s: the call's deadline in seconds.

        Raises:
            ClosedSessionError: the session was closed.
            CallFailedError: the engine failed (502) or the deadline passed (504); the call is
                recorded as lost.
        """
        if self.closed:
            raise ClosedSessionError(f"session of rollout {self.rollout_id!r} is closed: its rollout ended")
        if self.sampling is not None:
            sampling = self.sampling.model_copy(update={
                "max_new_tokens": min(sampling.max_new_tokens, self.sampling.max_new_tokens),
                "stop": sampling.stop or self.sampling.stop})
        node = self._longest_prefix(messages)
        start = len(node.key) if node else 0
        if node is None:
            session, kind = self.gateway.open_session(self.rollout_id, messages), ("branched" if self.nodes else "root")
        else:
            session, kind = node.session.fork(), ("continued" if node.n_children == 0 else "branched")
            for message in messages[start:]:
                session.add_message(message.role, message.content)
        replies = {n.key[-1] for n in self.nodes}
        if any(m.role == "assistant" and m in replies for m in messages[start:]):
            self.counts["retokenised"] += 1
        self.counts["calls"] += 1
        try:
            async with asyncio.timeout(timeout_s):
                text = await session.generate(sampling)
        except TimeoutError as exc:
            raise self.lose(f"call {self.counts['calls']} exceeded its deadline of {timeout_s:g} s", 504) from exc
        except Exception as exc:
            raise self.lose(f"call {self.counts['calls']} failed: {type(exc).__name__}: {exc}", 502) from exc
        if node is not None:
            node.n_children += 1
        if kind != "root":
            self.counts[kind] += 1
        self.nodes.append(CallNode((*messages, canonical_reply(text)), session))
        return CallOutcome(text, session.generations[-1], kind)

    def lose(self, reason: str, status: int = 502) -> CallFailedError:
        """Records a lost call (the rollout will not be trained on) and returns the error to raise."""
        self.counts["lost"] += 1
        self.lost.append(reason)
        return CallFailedError(reason, status)

    def abandon(self, reason: str) -> None:
        """Records a call whose client went away before the answer (its sampling was cancelled)."""
        self.counts["abandoned"] += 1
        self.abandoned.append(reason)

    def leaves(self) -> list[CallNode]:
        """Calls that no later call continued, oldest first."""
        return [n for n in self.nodes if n.n_children == 0]

    def trajectories(self, run_id: str, group_id: str, env_id: str, instance_id: str,
                     client_is_policy: bool = False) -> list[Trajectory]:
        """One trajectory per leaf, oldest first. The last leaf (the call the harness ended on) is
        the rollout's trajectory and keeps its rollout id; the i-th earlier one is
        ``<rollout>#<i>`` with ``metrics["branch_of"]`` the rollout id, and they are the last
        one's ``branches`` (stored beside it and trained with its advantage, docs/harness.md).

        Each carries the session's counts in ``metrics`` (``calls``, ``continued``, ``branched``,
        ``retokenised``, ``lost``, ``abandoned``, ``leaves``); with a lost call, status
        ``infra_error`` and the reason (the caller sets reward and other statuses). An abandoned
        call counts as lost unless ``client_is_policy`` (the client runs where the policy's
        commands run, so its disconnect may be the policy's doing).
        """
        lost = self.lost if client_is_policy else [*self.lost, *self.abandoned]
        out = []
        leaves = self.leaves()
        for i, leaf in enumerate(leaves, start=1):
            traj = leaf.session.to_trajectory(run_id, group_id, env_id, instance_id)
            if i < len(leaves):
                traj.rollout_id = f"{self.rollout_id}#{i}"
                traj.metrics["branch_of"] = self.rollout_id
            traj.metrics.update(self.metrics())
            if lost:
                traj.status, traj.reason = RolloutStatus.infra_error, f"lost a call, not trained on: {lost[0]}"
            out.append(traj)
        if out:
            out[-1].branches = out[:-1]
        return out

    def metrics(self) -> dict[str, int]:
        """The session's call counts."""
        keys = ("calls", "continued", "branched", "retokenised", "lost", "abandoned")
        return {**{k: int(self.counts[k]) for k in keys}, "leaves": len(self.leaves())}

    def _longest_prefix(self, messages: list[Message]) -> CallNode | None:
        best: CallNode | None = None
        for node in self.nodes:
            n = len(node.key)
            if n <= len(messages) and (best is None or n > len(best.key)) and tuple(messages[:n]) == node.key:
                best = node
        return best


class SessionRegistry:
    """Sessions by their unguessable token (``secrets.token_urlsafe(32)``: 256 bits).

    Args:
        gateway: the TITO gateway every session samples through.
    """

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._sessions: dict[str, HarnessSession] = {}

    def open(self, rollout_id: str, sampling: SamplingParams | None = None) -> HarnessSession:
        """Called when a harness rollout starts: a new session with a fresh token.

        Args:
            rollout_id: the rollout (the engine's routing key).
            sampling: the rollout's sampling, which every call of the session uses (its
                ``max_new_tokens`` caps the harness's); None: each call's own.
        """
        token = secrets.token_urlsafe(32)
        session = self._sessions[token] = HarnessSession(self.gateway, rollout_id, token, sampling=sampling)
        return session

    def get(self, token: str) -> HarnessSession:
        """The open session with ``token``.

        Raises:
            UnknownSessionError: no session has this token (or it was forgotten).
            ClosedSessionError: the session was closed.
        """
        session = self._sessions.get(token)
        if session is None:
            raise UnknownSessionError("no session has this URL: use the base URL your rollout was given")
        if session.closed:
            raise ClosedSessionError(f"session of rollout {session.rollout_id!r} is closed: its rollout ended")
        return session

    def close(self, session: HarnessSession) -> None:
        """Called when the rollout ends: later calls get 409 until :meth:`forget`."""
        session.closed = True

    def forget(self, session: HarnessSession) -> None:
        """Drops a closed session (later calls get 404)."""
        self._sessions.pop(session.token, None)

    def __len__(self) -> int:
        return len(self._sessions)
