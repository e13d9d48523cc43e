"""The prompt budget is enforced before generation: a prompt over it never reaches a replica, and
the rollout ends truncated (not an engine failure)."""

from __future__ import annotations

from typing import Any

import pytest

from gymfleet.core.records import Message, SamplingParams
from gymfleet.orchestrator.engines.errors import ContextLengthError
from gymfleet.orchestrator.gateway import DEFAULT_PROMPT_BUDGET, Gateway, GatewayConfig
from gymfleet.orchestrator.rollout import classify_policy_error
from gymfleet.core.records import RolloutStatus
from tests.orchestrator.fake_engine import FakeEngine


async def test_a_prompt_over_the_budget_is_not_sent(smollm_tokenizer: Any) -> None:
    engine = FakeEngine("r0")
    gateway = Gateway(smollm_tokenizer, engine, GatewayConfig(max_prompt_tokens=200))
    session = gateway.open_session("r1", [Message("system", "Be brief."), Message("user", "Hi.")])
    await session.generate(SamplingParams(max_new_tokens=2))
    session.add_message("user", "word " * 400)  # an oversize observation
    with pytest.raises(ContextLengthError, match="prompt budget of 200") as exc:
        await session.generate(SamplingParams(max_new_tokens=2))
    assert len(engine.calls) == 1  # the second prompt never reached the replica
    assert classify_policy_error(exc.value).status is RolloutStatus.truncated


def test_the_budget_defaults_to_the_tokenizers_context_else_128k(smollm_tokenizer: Any) -> None:
    class Named:  # a tokenizer that names its context
        def __getattr__(self, name: str) -> Any:
            return 8192 if name == "model_max_length" else getattr(smollm_tokenizer, name)

    assert Gateway(Named(), FakeEngine("r0")).prompt_budget == 8192
    assert smollm_tokenizer.model_max_length > 10**7  # the GGUF tokenizer names none
    assert Gateway(smollm_tokenizer, FakeEngine("r0")).prompt_budget == DEFAULT_PROMPT_BUDGET
