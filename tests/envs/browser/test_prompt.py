"""The browser env's system prompts: ``prompt: brief`` is the action grammar alone."""

from __future__ import annotations

from gymfleet.envs.browser.actions import GRAMMAR
from gymfleet.envs.browser.env import BRIEF_SYSTEM_PROMPT, SYSTEM_PROMPT, BrowserEnv


def test_brief_prompt_is_the_grammar_alone() -> None:
    assert BrowserEnv(tasks=["click-test-2"]).system_prompt == SYSTEM_PROMPT
    brief = BrowserEnv(tasks=["click-test-2"], prompt="brief")
    assert brief.system_prompt == BRIEF_SYSTEM_PROMPT and GRAMMAR in BRIEF_SYSTEM_PROMPT
    assert len(BRIEF_SYSTEM_PROMPT) < len(SYSTEM_PROMPT) / 2
