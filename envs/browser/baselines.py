"""Baseline policies for the browser env: random actions on the ids the page shows."""

from __future__ import annotations

import random

from gymfleet.envs.browser.page_text import parse_observation


class RandomPolicy:
    """Clicks, fills or scrolls at random among the elements of the latest observation.

    The floor a learned policy must beat; with a fixed ``seed`` and fixed page seeds an episode
    is reproducible.
    """

    def __init__(self, seed: int = 0, words: tuple[str, ...] = ("yes", "hello", "42")) -> None:
        self.rng = random.Random(seed)
        self.words = words

    async def act(self, observation: str) -> str:
        ids = parse_observation(observation).ids()
        if not ids:
            return "noop()"
        target = self.rng.choice(ids)
        kind = self.rng.choice(("click", "click", "click", "fill", "scroll"))
        if kind == "fill":
            return f'fill({target}, "{self.rng.choice(self.words)}")'
        if kind == "scroll":
            return f"scroll(0, {self.rng.choice((-100, 100))})"
        return f"click({target})"
