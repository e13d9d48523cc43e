"""Gateway (TITO): owns tokenizer and chat template, keeps each rollout as token ids, stamps versions.

Each turn's prompt is the exact token ids of the conversation so far plus the new messages'
tokens; generated ids and their logprobs come from the engine and are never re-tokenised.
Environment tokens get loss mask 0, logprob 0 and version -1 (docs/design.md, Trajectory).
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from typing import Any

import numpy as np
from pydantic import Field

from gymfleet.core.records import Message, SamplingParams, Trajectory
from gymfleet.core.sampling import turn_seed
from gymfleet.core.strict import StrictModel
from gymfleet.orchestrator.chat_template import ChatTemplate
from gymfleet.orchestrator.engines.adapters import adapter_name
from gymfleet.orchestrator.engines.errors import ContextLengthError
from gymfleet.orchestrator.protocols import Engine

log = logging.getLogger(__name__)


DEFAULT_PROMPT_BUDGET = 131_072
"""The prompt budget when neither the config nor the tokenizer names one: 128 Ki tokens, the
longest context of the common open models (Llama 3.1, Qwen2.5)."""


class GatewayConfig(StrictModel):
    """Settings of the policy gateway."""

    run_id: str = "run"
    """Training run whose adapters are served; adapter names are ``<run_id>-v000012``."""
    max_prompt_tokens: int | None = Field(default=None, ge=1)
    """The prompt budget: most tokens a turn's prompt may hold. A longer prompt is never sent to a
    replica (``ContextLengthError`` at once: the rollout ends truncated), so one huge observation
    costs no prefill. None: the tokenizer's ``model_max_length`` when it names a real one (under
    10^7 tokens), else :data:`DEFAULT_PROMPT_BUDGET`."""
    keep_versions: int = Field(default=2, ge=1)
    """Adapter versions kept loaded; older ones are unloaded after a publish, each once no turn
    sampled with it is still in flight."""


class Session:
    """One rollout's conversation as token ids (a :class:`~gymfleet.orchestrator.protocols.PolicySession`)."""

    def __init__(self, gateway: Gateway, rollout_id: str, messages: list[Message]) -> None:
        self.rollout_id = rollout_id
        self._gateway = gateway
        self._template = gateway.template
        self.messages: list[Message] = []
        self.token_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.generations: list[Any] = []
        self._rendered: dict[tuple[int, bool, Message | None], str] = {}
        first = list(messages)
        if first:
            self._append_env(self._template.encode(self._render(first, False)))
            self.messages = first

    async def generate(self, sampling: SamplingParams) -> str:
        """Samples the assistant's reply; appends its ids (mask 1), logprobs and version; returns its text.

        Args:
            sampling: the rollout's sampling; its ``seed``, when set, is the seed base: this turn
                samples with ``turn_seed(seed, rollout_id, turn)`` (gymfleet/core/sampling.py),
                so each turn draws fresh numbers and a rerun of the rollout id draws the same ones.

        Raises:
            ContextLengthError: the prompt is over the prompt budget (``prompt_budget``): not sent.
            InferenceError: from the engine (ContextLengthError, NoReplicaError, ...); the
                conversation is left as it was before the call.
        """
        template = self._template
        prompt_ids = self.token_ids + template.encode(template.generation_prompt(self.messages, self._render))
        budget = self._gateway.prompt_budget
        if len(prompt_ids) > budget:
            raise ContextLengthError(f"the prompt has {len(prompt_ids)} tokens, over the prompt budget of {budget} "
                                     "(gateway max_prompt_tokens): not sent")
        if sampling.seed is not None:
            sampling = sampling.model_copy(update={"seed": turn_seed(sampling.seed, self.rollout_id, len(self.generations))})
        adapter = self._gateway.lease_adapter()
        try:
            generation = await self._gateway.engine.generate(
                prompt_ids, sampling, adapter=adapter, routing_key=self.rollout_id
            )
        finally:
            await self._gateway.release_adapter(adapter)
        self._append_env(prompt_ids[len(self.token_ids) :])
        self.token_ids += generation.token_ids
        self.loss_mask += [1] * len(generation.token_ids)
        self.logprobs += list(generation.logprobs)
        self.versions += [generation.adapter_version] * len(generation.token_ids)
        self.generations.append(generation)
        content = template.decode(generation.token_ids)
        ended_with_eos = bool(generation.token_ids) and generation.token_ids[-1] == template.eos_id
        self._append_env(template.encode(template.turn_end(self.messages, content, ended_with_eos, self._render)))
        self.messages.append(Message("assistant", content))
        return content

    def add_message(self, role: str, content: str) -> None:
        """Appends an environment message's tokens (loss mask 0)."""
        message = Message(role, content)
        self._append_env(self._template.encode(self._template.message_delta(self.messages, message, self._render)))
        self.messages.append(message)

    def fork(self) -> Session:
        """A copy of this conversation that grows independently (a branch of an HTTP session's
        tree, orchestrator/http/tree.py): the ids, mask, logprobs and versions so far are shared
        values, never re-tokenised."""
        twin = copy.copy(self)
        twin.messages, twin.token_ids, twin.loss_mask = list(self.messages), list(self.token_ids), list(self.loss_mask)
        twin.logprobs, twin.versions, twin.generations = list(self.logprobs), list(self.versions), list(self.generations)
        twin._rendered = dict(self._rendered)
        return twin

    def to_trajectory(self, run_id: str, group_id: str, env_id: str, instance_id: str) -> Trajectory:
        """The token-exact record of the rollout so far (reward and status set by the caller)."""
        return Trajectory(
            rollout_id=self.rollout_id, run_id=run_id, group_id=group_id, env_id=env_id, instance_id=instance_id,
            token_ids=np.asarray(self.token_ids, np.int32), loss_mask=np.asarray(self.loss_mask, np.uint8),
            logprobs=np.asarray(self.logprobs, np.float32), versions=np.asarray(self.versions, np.int32),
            messages=list(self.messages),
        )

    def _render(self, messages: list[Message], add_generation_prompt: bool) -> str:
        """:meth:`ChatTemplate.render` of this session's messages (or them plus the next one),
        each text rendered once: a turn's deltas need the same three renders twice each.

        Sound because the session only renders extensions of its own messages, which only grow:
        the length, the flag and the last message name the list."""
        key = (len(messages), add_generation_prompt, messages[-1] if messages else None)
        text = self._rendered.get(key)
        if text is None:
            text = self._rendered[key] = self._template.render(messages, add_generation_prompt)
            if len(self._rendered) > 4:  # a turn needs the last three or four
                del self._rendered[next(iter(self._rendered))]
        return text

    def _append_env(self, ids: list[int]) -> None:
        self.token_ids += ids
        self.loss_mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.versions += [-1] * len(ids)


class Gateway:
    """The :class:`~gymfleet.orchestrator.protocols.PolicyGateway` over an Engine (usually a Router).

    Raises:
        ChatTemplateError: at construction, when the tokenizer's chat template does not keep
            earlier tokens a bit-exact prefix (the message says where it breaks).
    """

    def __init__(self, tokenizer: Any, engine: Engine, config: GatewayConfig | None = None) -> None:
        self.config = config or GatewayConfig()
        model_max = getattr(tokenizer, "model_max_length", None)
        self.prompt_budget: int = self.config.max_prompt_tokens or (
            model_max if isinstance(model_max, int) and 0 < model_max < 10**7 else DEFAULT_PROMPT_BUDGET)
        """Most tokens a prompt may hold (:attr:`GatewayConfig.max_prompt_tokens`)."""
        self.template = ChatTemplate(tokenizer)
        self.template.check_prefix_property()
        self.engine = engine
        self.adapter: str | None = None
        self._version = 0
        self._loaded: list[str] = []
        self._retired: set[str] = set()
        """Versions past ``keep_versions`` still sampled by a turn in flight: unloaded when it ends."""
        self._in_flight: Counter[str] = Counter()

    def open_session(self, rollout_id: str, messages: list[Message]) -> Session:
        """A new conversation holding the system prompt and first observation."""
        return Session(self, rollout_id, messages)

    @property
    def policy_version(self) -> int:
        """The newest adapter version served (0 = base model)."""
        return self._version

    async def publish_adapter(self, version: int, path: str) -> str:
        """Loads adapter ``version`` on every replica and serves it to later turns.

        Returns:
            The adapter name (``<run_id>-v000012``).

        Raises:
            AdapterPublishError: some replica failed; the version is not published (the
                previous one keeps being served).
        """
        name = adapter_name(self.config.run_id, version)
        await self.engine.load_adapter(name, path)
        self.adapter, self._version = name, version
        self._loaded.append(name)
        while len(self._loaded) > self.config.keep_versions:
            self._retired.add(self._loaded.pop(0))
        for old in sorted(self._retired):
            if not self._in_flight[old]:
                await self._unload(old)
        return name

    def lease_adapter(self) -> str | None:
        """The adapter a turn samples with (the newest; None = base model), held until
        :meth:`release_adapter`: a version is never unloaded under a turn that queued on it."""
        name = self.adapter
        if name is not None:
            self._in_flight[name] += 1
        return name

    async def release_adapter(self, name: str | None) -> None:
        """Ends a turn's lease; unloads its version if a publish retired it meanwhile.

        Never raises: a failed unload is logged (the replica keeps the adapter loaded).
        """
        if name is None:
            return
        self._in_flight[name] -= 1
        if not self._in_flight[name]:
            del self._in_flight[name]
            if name in self._retired:
                await self._unload(name)

    async def _unload(self, name: str) -> None:
        self._retired.discard(name)
        try:
            await self.engine.unload_adapter(name)
        except Exception as exc:  # a replica that cannot unload keeps serving; the next load may hit its limit
            log.warning("unloading retired adapter %s failed: %s", name, exc)
