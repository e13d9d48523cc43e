"""Starting Debian's Chromium through Playwright (the switches are the browser env's)."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

from gymfleet.envs.browser.chromium import DEFAULT_ARGS
from gymfleet.envs.slides.errors import RenderError

if TYPE_CHECKING:
    from playwright.async_api import Browser, Playwright

# The browser env's switches (closed network, no first-run work, deterministic text rendering):
# the same set, so that a process's slides and browser envs share one Chromium.
CHROMIUM_ARGS = list(DEFAULT_ARGS)


async def launch_chromium(playwright: Playwright, executable_path: str | None = None) -> Browser:
    """Launches headless Chromium (``executable_path``, else ``$GYMFLEET_CHROMIUM``, else the
    ``chromium`` on PATH; ``playwright install`` is never needed).

    Raises:
        RenderError: no Chromium binary was found or it did not start.
    """
    path = executable_path or os.environ.get("GYMFLEET_CHROMIUM") or shutil.which("chromium")
    if not path or not os.path.exists(path):
        raise RenderError(
            "Chromium not found: apt-get install chromium (make services), or set GYMFLEET_CHROMIUM"
        )
    try:
        return await playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
    except Exception as exc:  # Playwright raises its own Error for every launch failure
        raise RenderError(f"Chromium at {path} did not start: {exc}") from exc
