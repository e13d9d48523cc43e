"""Demonstrations: gold-policy episodes recorded through the TITO gateway, token-exact.

A :class:`DemonstrationGateway` is a :class:`~gymfleet.orchestrator.protocols.PolicyGateway`
whose sessions answer each turn with the gold policy's action instead of sampling: the action's
text is tokenised in place as the assistant's turn, so the recorded token ids are exactly what
the policy sees (and would have to generate) in a rollout of the same episode. It drives the
gateway's own :class:`~gymfleet.orchestrator.gateway.Session` through a
:class:`TeacherForcingEngine`, so the chat-template code (generation prompt, turn end, EOS) is
the gateway's, not a copy.

What a demonstration records, turn by turn (docs/train.md, Warm start):

* the action's tokens ``encode(action) + [EOS]`` get loss mask 1 (the policy is to learn to
  write them, and to stop);
* their behaviour logprobs are 0 and their versions -1: nothing was sampled, no adapter
  generated them; these fields must not be read as a behaviour policy (demonstrations are
  stored under their own run id and never enter GRPO's groups);
* everything else (system prompt, observations, generation prompts, turn ends) gets loss mask 0,
  as in any rollout.
"""

from __future__ import annotations

from typing import Any

from gymfleet.core.records import Generation, Message, SamplingParams, Trajectory
from gymfleet.envs.base import Policy
from gymfleet.orchestrator.chat_template import ChatTemplate
from gymfleet.orchestrator.errors import PolicyError
from gymfleet.orchestrator.gateway import Gateway, GatewayConfig, Session

DEMO_VERSION = -1
"""Version stamped on demonstration tokens: no adapter generated them."""


class TeacherForcingEngine:
    """An :class:`~gymfleet.orchestrator.protocols.Engine` that "generates" the text it was told to.

    Args:
        template: the policy's chat template (its tokenisation and EOS token are used).
    """

    name = "teacher-forcing"

    def __init__(self, template: ChatTemplate) -> None:
        self.template = template
        self._next: dict[str, str] = {}

    def force(self, routing_key: str, text: str) -> None:
        """Called by a demonstration session before each turn: the text its next turn generates."""
        self._next[routing_key] = text

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None,
                       routing_key: str | None = None) -> Generation:
        """``encode(text) + [EOS]`` with logprobs 0 and version -1 (nothing was sampled).

        Raises:
            PolicyError: no text was forced for ``routing_key``.
        """
        text = self._next.pop(routing_key or "", None)
        if text is None:
            raise PolicyError(f"no demonstration turn was forced for rollout {routing_key!r}: "
                              "call DemonstrationSession.generate, not the engine")
        ids = [*self.template.encode(text), self.template.eos_id]
        return Generation(ids, [0.0] * len(ids), "stop", adapter_version=DEMO_VERSION, replica=self.name,
                          n_prompt_tokens=len(prompt_ids))

    async def load_adapter(self, name: str, path: str) -> None:
        """Nothing to load: demonstrations do not sample."""

    async def unload_adapter(self, name: str) -> None:
        """Nothing to unload."""

    async def health(self) -> bool:
        """Always healthy."""
        return True


class DemonstrationSession:
    """One gold episode as token ids (a :class:`~gymfleet.orchestrator.protocols.PolicySession`).

    Each :meth:`generate` asks the gold policy for its action on the latest observation and
    appends the action as a teacher-forced assistant turn through the gateway's session.
    """

    def __init__(self, session: Session, engine: TeacherForcingEngine, policy: Policy) -> None:
        self.rollout_id = session.rollout_id
        self._session = session
        self._engine = engine
        self._policy = policy

    async def generate(self, sampling: SamplingParams) -> str:
        """The gold action on the latest observation, appended with loss mask 1, logprobs 0,
        versions -1; returns the text the env receives (the decoded tokens, as for a policy)."""
        observation = self._session.messages[-1].content if self._session.messages else ""
        self._engine.force(self.rollout_id, await self._policy.act(observation))
        return await self._session.generate(sampling)

    def add_message(self, role: str, content: str) -> None:
        """Appends an observation's tokens (loss mask 0)."""
        self._session.add_message(role, content)

    def to_trajectory(self, run_id: str, group_id: str, env_id: str, instance_id: str) -> Trajectory:
        """The token-exact record, marked ``metrics["demonstration"] = True``."""
        traj = self._session.to_trajectory(run_id, group_id, env_id, instance_id)
        traj.metrics["demonstration"] = True
        return traj


class DemonstrationGateway:
    """A :class:`~gymfleet.orchestrator.protocols.PolicyGateway` playing gold policies.

    Register each rollout's gold policy with :meth:`expect` before the rollout opens its session,
    or each group's with :meth:`expect_group` (a scheduler's rollouts, whose ids it makes).

    Args:
        tokenizer: the policy's tokenizer (its chat template renders the conversation).

    Raises:
        ChatTemplateError: the template does not keep earlier tokens a bit-exact prefix (as the
            gateway).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.engine = TeacherForcingEngine(ChatTemplate(tokenizer))
        self.gateway = Gateway(tokenizer, self.engine, GatewayConfig(run_id="demonstrations"))
        self.template = self.gateway.template
        self._policies: dict[str, Policy] = {}
        self._group_policies: dict[str, Policy] = {}

    def expect(self, rollout_id: str, policy: Policy) -> None:
        """Called before a rollout starts: the gold policy that plays ``rollout_id``."""
        self._policies[rollout_id] = policy

    def expect_group(self, group_id: str, policy: Policy) -> None:
        """Called before a group's rollouts start: the gold policy that plays every rollout of
        ``group_id`` (a rollout id is ``<group_id>/<sample>/<attempt>``; a retried rollout plays
        again). The policy must be stateless across episodes."""
        self._group_policies[group_id] = policy

    def _policy_for(self, rollout_id: str) -> Policy | None:
        policy = self._policies.pop(rollout_id, None)
        if policy is not None:
            return policy
        group_id = rollout_id.rsplit("/", 2)[0]
        return self._group_policies.get(group_id)

    def open_session(self, rollout_id: str, messages: list[Message]) -> DemonstrationSession:
        """A session replaying the gold policy registered for ``rollout_id``.

        Raises:
            PolicyError: no policy was registered with :meth:`expect` or :meth:`expect_group`.
        """
        policy = self._policy_for(rollout_id)
        if policy is None:
            raise PolicyError(f"no gold policy registered for rollout {rollout_id!r}: call expect() or "
                              "expect_group() first")
        return DemonstrationSession(self.gateway.open_session(rollout_id, messages), self.engine, policy)

    @property
    def policy_version(self) -> int:
        """Always -1: demonstrations come from no adapter."""
        return DEMO_VERSION
