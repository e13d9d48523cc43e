"""Hostile pages: a handler stuck in ``while(true){}`` and a page that floods popups. Every browser
call is bounded by the step timeout, popups are closed as they open, and the next episode starts
on a fresh page whatever the last one did."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from gymfleet.envs.browser.env import BrowserEnv
from gymfleet.envs.browser.tasks import TaskOutcome, UrlTask

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

HANG = """<html><head><title>Hang</title></head><body>
<button onclick="while (true) {}">Freeze</button><button onclick="document.title = 'ok'">Fine</button>
</body></html>"""

POPUPS = """<html><head><title>Popups</title></head><body>
<button onclick="for (let i = 0; i < 150; i++) window.open('about:blank#' + i)">More</button>
<a href="about:blank" target="_blank">New tab</a>
<script>setInterval(() => window.open('about:blank'), 20);</script>
</body></html>"""


POPUPS_IN_FLIGHT = 8  # the episode's page plus popups opened but not yet closed


async def open_page_counts(env: BrowserEnv, samples: int = 10, every_s: float = 0.1) -> list[int]:
    """The episode context's page count, sampled ``samples`` times ``every_s`` seconds apart."""
    counts = []
    for _ in range(samples):
        await asyncio.sleep(every_s)
        assert env._context is not None
        counts.append(len(env._context.pages))
    return counts


async def title_is_ok(page) -> TaskOutcome:
    title = await page.title()
    return TaskOutcome(reward=float(title == "ok"), done=title == "ok", reason=title)


def button_id(obs: str, name: str) -> int:
    match = re.search(rf'\[(\d+)\] (?:button|link) "{name}"', obs)
    assert match, obs
    return int(match.group(1))


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, str]:
    folder = Path(tmp_path_factory.mktemp("hostile"))
    (folder / "hang.html").write_text(HANG)
    (folder / "popups.html").write_text(POPUPS)
    return {name: (folder / f"{name}.html").as_uri() for name in ("hang", "popups")}


async def test_a_page_stuck_in_a_loop_ends_the_step_in_time(pages: dict[str, str], browser_host) -> None:
    task = UrlTask("hang", pages["hang"], "Press Fine.", title_is_ok)
    env = BrowserEnv(host=browser_host, tasks=[task], step_timeout_s=3.0)
    try:
        obs, _ = await env.reset_async()
        started = time.monotonic()
        async with asyncio.timeout(30):  # before: 60 s and more in page.evaluate
            obs, reward, terminated, truncated, info = await env.step_async(f"click({button_id(obs, 'Freeze')})")
        assert time.monotonic() - started < 15
        assert truncated and not terminated and reward == 0.0 and "did not answer" in obs
        assert "step_timeout_s=3" in info["reason"]
        over = await env.step_async("noop()")  # nothing more to do on this episode
        assert over[2] and "over" in over[0]
        # the next episode works on a fresh page, and so does the shared browser
        obs, _ = await env.reset_async()
        obs, reward, terminated, _, _ = await env.step_async(f"click({button_id(obs, 'Fine')})")
        assert terminated and reward == 1.0
    finally:
        await env.close_async()


async def test_popups_are_closed_and_do_not_outlive_the_episode(pages: dict[str, str], browser_host) -> None:
    task = UrlTask("popups", pages["popups"], "Do nothing.", title_is_ok)
    # The step bound is not under test here (test_a_page_stuck_in_a_loop_ends_the_step_in_time
    # is): a loaded CI machine must not end the episode on it before the popups are counted.
    env = BrowserEnv(host=browser_host, tasks=[task], max_turns=5, step_timeout_s=120.0)
    try:
        obs, _ = await env.reset_async()
        await env.step_async(f"click({button_id(obs, 'More')})")
        obs, _, _, _, info = await env.step_async(f"click({button_id(obs, 'New tab')})")
        assert env._context is not None, info.get("reason")  # the episode goes on
        # The interval keeps opening one every 20 ms, so a few may be open while they are closed
        # (3 seen on a loaded CI machine). Unbounded, the pages would only grow: 151 after the
        # click, +25 more each half second.
        counts = await open_page_counts(env)
        assert max(counts) <= POPUPS_IN_FLIGHT, counts
        assert info["popups_closed"] >= 10
        first_context = env._context
        await env.reset_async()
        counts = await open_page_counts(env)
        assert max(counts) <= POPUPS_IN_FLIGHT, counts
        assert env._page is not None and not env._page.is_closed()
        contexts = (await browser_host.start()).contexts
        assert first_context not in contexts and first_context.pages == []  # before: 151 survived
        open_pages = sum(len(c.pages) for c in contexts)
        assert open_pages <= POPUPS_IN_FLIGHT + 1, open_pages
        del first_context
    finally:
        await env.close_async()
