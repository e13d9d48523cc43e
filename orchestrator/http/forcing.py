"""An engine that "samples" scripted completions per rollout: gold demonstrations (and no-op
policies) forced through a harness, as the warm start forces gold through the TITO gateway.

Forced tokens are ``encode(text) + [EOS]`` with logprob 0 and version -1, as
``teacher_forcing.TeacherForcingEngine`` stamps them (nothing was sampled; docs/train.md).
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

from gymfleet.core.records import Generation, SamplingParams
from gymfleet.orchestrator.errors import PolicyError
from gymfleet.orchestrator.teacher_forcing import DEMO_VERSION


class ScriptedRepliesEngine:
    """An :class:`~gymfleet.orchestrator.protocols.Engine` answering each rollout's calls in order.

    Args:
        tokenizer: the policy's tokenizer (its ids and EOS are what is recorded).
    """

    name = "scripted-replies"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._replies: dict[str, deque[str]] = defaultdict(deque)
        self._group_replies: dict[str, list[str]] = {}

    def script(self, rollout_id: str, replies: list[str]) -> None:
        """Called before a rollout starts: the completions its calls get, in order."""
        self._replies[rollout_id].extend(replies)

    def script_group(self, group_id: str, replies: list[str]) -> None:
        """Called before a group's rollouts start: the completions each rollout of ``group_id``
        gets, in order (a rollout id is ``<group_id>/<sample>/<attempt>``: a retried rollout
        starts the script again)."""
        self._group_replies[group_id] = list(replies)

    def _queue(self, rollout_id: str) -> deque[str] | None:
        if rollout_id not in self._replies:
            group = self._group_replies.get(rollout_id.rsplit("/", 2)[0])
            if group is None:
                return None
            self._replies[rollout_id].extend(group)
        return self._replies[rollout_id]

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None,
                       routing_key: str | None = None) -> Generation:
        """The rollout's next scripted completion.

        Raises:
            PolicyError: the rollout's script is used up (the harness made more calls).
        """
        queue = self._queue(routing_key or "")
        if not queue:
            raise PolicyError(f"no scripted reply left for rollout {routing_key!r}")
        ids = [*self.tokenizer.encode(queue.popleft(), add_special_tokens=False), self.tokenizer.eos_token_id]
        return Generation(ids, [0.0] * len(ids), "stop", DEMO_VERSION, self.name, len(prompt_ids))

    async def load_adapter(self, name: str, path: str) -> None:
        """Nothing to load."""

    async def unload_adapter(self, name: str) -> None:
        """Nothing to unload."""

    async def health(self) -> bool:
        """Always healthy."""
        return True
