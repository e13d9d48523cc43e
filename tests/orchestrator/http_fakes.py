"""An engine that samples scripted texts (for HTTP gateway tests): the real Engine Protocol,
the real tokenizer's ids, a known logprob per token, and every prompt it was sent recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gymfleet.core.records import Generation, SamplingParams


class ScriptedTextEngine:
    """Answers each call with ``reply(prompt_ids)`` tokenised, plus EOS; logprob -(i+1)/100 for token i.

    Args:
        tokenizer: the policy's tokenizer.
        reply: the text to "sample" for a prompt (by default the next of ``texts``, cycling).
        version: the adapter version stamped on generated tokens.
    """

    name = "scripted"

    def __init__(self, tokenizer: Any, texts: list[str] | None = None,
                 reply: Callable[[list[int]], str] | None = None, version: int = 3) -> None:
        self.tokenizer = tokenizer
        self.texts = list(texts or ["ok"])
        self.reply = reply
        self.version = version
        self.prompts: list[list[int]] = []
        self.generations: list[Generation] = []
        self.delay_s = 0.0
        self.fail = False

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None,
                       routing_key: str | None = None) -> Generation:
        self.prompts.append(list(prompt_ids))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("replica gone")
        text = self.reply(prompt_ids) if self.reply else self.texts[(len(self.prompts) - 1) % len(self.texts)]
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        generation = Generation(ids, [-(i + 1) / 100 for i in range(len(ids))], "stop", self.version, self.name,
                                len(prompt_ids))
        self.generations.append(generation)
        return generation

    async def load_adapter(self, name: str, path: str) -> None:
        """Nothing to load."""

    async def unload_adapter(self, name: str) -> None:
        """Nothing to unload."""

    async def health(self) -> bool:
        return True
