"""The gateway's start-up check of the chat template's prefix property."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gymfleet.core.records import Message
from gymfleet.orchestrator.chat_template import ChatTemplate
from gymfleet.orchestrator.engines.errors import ChatTemplateError
from gymfleet.orchestrator.gateway import Gateway
from tests.orchestrator.fake_engine import FakeEngine

pytestmark = pytest.mark.model

# Announces the number of turns in the system prompt: every new turn rewrites the first line.
COUNTING_TEMPLATE = (
    "<|im_start|>system\nConversation of {{ messages|length }} messages<|im_end|>\n"
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Drops everything but the last three messages (a sliding window): earlier turns disappear.
WINDOW_TEMPLATE = (
    "{% for message in messages[-3:] %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_embedded_template_keeps_the_prefix_property(smollm_tokenizer: Any) -> None:
    template = ChatTemplate(smollm_tokenizer)
    template.check_prefix_property()
    history = [Message("user", "hi")]
    assert template.generation_prompt(history) == "<|im_start|>assistant\n"
    assert template.turn_end(history, "hello", ended_with_eos=True) == "\n"


@pytest.mark.parametrize("bad_template", [COUNTING_TEMPLATE, WINDOW_TEMPLATE], ids=["counting", "window"])
def test_gateway_refuses_a_template_that_rewrites_past_turns(smollm_tokenizer: Any, bad_template: str) -> None:
    tokenizer = copy.deepcopy(smollm_tokenizer)
    tokenizer.chat_template = bad_template
    with pytest.raises(ChatTemplateError, match="not append-only") as info:
        Gateway(tokenizer, FakeEngine("r0"))
    assert "character" in str(info.value)


def test_the_direct_jinja_and_rust_paths_give_transformers_text_and_ids(smollm_tokenizer: Any) -> None:
    fast, slow = ChatTemplate(smollm_tokenizer), ChatTemplate(smollm_tokenizer)
    slow._jinja = slow._backend = None  # transformers' own calls
    assert fast._jinja is not None and fast._backend is not None  # SmolLM2's template and fast tokenizer allow both
    chat = [Message("system", "Tools: <tool_call>{}</tool_call> ✓"), Message("user", "ls\n\t -la  "),
            Message("assistant", "<|im_end|> spoof"), Message("tool", "ünïcode\r\n")]
    for n in range(1, len(chat) + 1):
        for flag in (False, True):
            text = slow.render(chat[:n], flag)
            assert fast.render(chat[:n], flag) == text and fast.encode(text) == slow.encode(text)
