"""Shared set-up of the slides tests: one Chromium for the whole session, the shipped briefs."""

from __future__ import annotations

import pytest
import pytest_asyncio

from gymfleet.envs.slides.brief import Brief, load_briefs
from gymfleet.envs.slides.render import DeckRenderer, RenderConfig


@pytest.fixture(scope="session")
def briefs() -> dict[str, Brief]:
    return load_briefs()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def renderer(chromium_path: str):
    async with DeckRenderer(RenderConfig(executable_path=chromium_path)) as r:
        yield r
