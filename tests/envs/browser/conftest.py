"""One Chromium for the whole test session: every browser test opens its env on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from gymfleet.envs.browser.chromium import ChromiumConfig, LocalChromium


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser_host(chromium_path: str) -> AsyncIterator[LocalChromium]:
    """A started local Chromium shared by the session (fails in CI when Chromium is missing)."""
    async with LocalChromium(ChromiumConfig(executable_path=chromium_path)) as host:
        yield host
