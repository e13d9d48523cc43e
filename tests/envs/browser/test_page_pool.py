"""The page pool: episodes reuse a context and page only once scrubbed, and the pool is bounded.

A page is an adversary's (a policy acts on it), so the next episode on a reused page must find
nothing of the last one: storage of every kind, cookies, ``window.name``, the DOM, the history.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from gymfleet.envs.browser.env import BrowserEnv
from gymfleet.envs.browser.hosts import BrowserHosts
from gymfleet.envs.browser.pages import PagePool
from gymfleet.envs.browser.tasks import TaskOutcome, UrlTask
from gymfleet.envs.resources import EnvResources

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

# On load the page shows what it finds of an earlier episode; "Write" leaves a trace of every
# kind and ends the episode (title "done").
TRACES = """<!doctype html><html><head><title>start</title></head><body>
<p id="found">checking</p>
<button onclick="write_all()">Write</button>
<script>
async function found() {
  const dbs = (await indexedDB.databases()).map(d => d.name);
  return [localStorage.getItem('trace'), sessionStorage.getItem('trace'), window.name || null,
          dbs.length ? dbs.join(',') : null, document.getElementById('planted') ? 'dom' : null,
          (await caches.keys()).length ? 'cache' : null].filter(x => x !== null);
}
found().then(f => { document.getElementById('found').textContent = f.length ? 'left: ' + f.join(' ') : 'clean'; });
async function write_all() {
  localStorage.setItem('trace', 'local'); sessionStorage.setItem('trace', 'session');
  window.name = 'name'; indexedDB.open('tracedb', 1);
  try { await caches.open('tracecache'); } catch (e) {}
  const p = document.createElement('p'); p.id = 'planted'; document.body.appendChild(p);
  document.title = 'done';
}
</script></body></html>"""


async def title_done(page) -> TaskOutcome:
    title = await page.title()
    return TaskOutcome(reward=float(title == "done"), done=title == "done")


def button_id(obs: str, name: str) -> int:
    match = re.search(rf'\[(\d+)\] button "{name}"', obs)
    assert match, obs
    return int(match.group(1))


@pytest.fixture(scope="module")
def traces_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = Path(tmp_path_factory.mktemp("traces"))
    (folder / "traces.html").write_text(TRACES)
    return folder, (folder / "traces.html").as_uri()


async def found_text(env: BrowserEnv) -> str:
    """The page's report of earlier traces, once its async check has run."""
    assert env._page is not None
    await env._page.wait_for_function("() => document.getElementById('found').textContent !== 'checking'")
    return await env._page.inner_text("#found")


async def test_a_reused_page_shows_nothing_of_the_last_episode(chromium_path: str, traces_page) -> None:
    folder, url = traces_page
    task = UrlTask("traces", url, "Press Write.", title_done)
    async with EnvResources.open(probe=()) as resources:
        env = BrowserEnv(resources=resources, tasks=[task], pages_dirs=[folder],
                         chromium={"executable_path": chromium_path})
        pool = resources.get(BrowserHosts).pages
        try:
            obs, _ = await env.reset_async()
            first_context = env._context
            assert await found_text(env) == "clean"
            assert env._context is not None
            await env._context.add_cookies([{"name": "trace", "value": "1", "url": "http://127.0.0.1:9/"}])
            obs, reward, terminated, _, _ = await env.step_async(f"click({button_id(obs, 'Write')})")
            assert terminated and reward == 1.0
            # the control: without a scrub the same page would show every trace
            await env._page.reload()
            assert set((await found_text(env)).split()) >= {"left:", "local", "session", "name", "tracedb"}

            await env.reset_async()  # the next episode, on the same (scrubbed) context and page
            assert env._context is first_context and pool.reused == 1
            assert await found_text(env) == "clean"
            assert await env._context.cookies() == []
            cdp = await env._context.new_cdp_session(env._page)
            history = await cdp.send("Page.getNavigationHistory")
            await cdp.detach()
            assert [e["url"] for e in history["entries"]] in (["about:blank", url], [url])
        finally:
            await env.close_async()
        assert resources.usage().browser_contexts == 0
        assert resources.usage().counters["browser_contexts_idle"] == 1


async def test_a_hung_or_failed_episode_s_page_is_closed_not_reused(chromium_path: str, traces_page) -> None:
    folder, url = traces_page
    task = UrlTask("traces", url, "Press Write.", title_done)
    async with EnvResources.open(probe=()) as resources:
        hosts = resources.get(BrowserHosts)
        env = BrowserEnv(resources=resources, tasks=[task], pages_dirs=[folder],
                         chromium={"executable_path": chromium_path})
        try:
            await env.reset_async()
            context = env._context
            await env._close_context(reusable=False)  # the path of an error or a hung page
            assert context is not None and context.pages == []
            assert hosts.pages.n_idle == 0 and hosts.pages.n_open == 0
            await env.reset_async()
            assert env._context is not context and hosts.pages.reused == 0 and hosts.pages.opened == 2
        finally:
            await env.close_async()


async def test_the_pool_never_holds_more_than_max_pages(chromium_path: str) -> None:
    from gymfleet.envs.browser.chromium import ChromiumConfig

    hosts = BrowserHosts(max_pages=2, max_idle_pages=1)
    try:
        host = await hosts.host("local", ChromiumConfig(executable_path=chromium_path))
        a = await hosts.lease_page(host)
        b = await hosts.lease_page(host)
        third = asyncio.create_task(hosts.lease_page(host))
        for _ in range(20):  # let it run up to its wait: no I/O happens before it
            await asyncio.sleep(0)
        assert not third.done() and hosts.pages.n_open == 2
        await hosts.give_back_page(a, reusable=True)  # scrubbed, then handed to the waiter
        c = await asyncio.wait_for(third, 60)
        assert c is a and hosts.pages.n_open == 2 and hosts.pages.n_leased == 2
        await hosts.give_back_page(b, reusable=True)
        await hosts.give_back_page(c, reusable=True)
        assert hosts.pages.n_idle == 1 and hosts.pages.n_open == 1  # max_idle_pages: one kept
        assert b.context.pages == [] or c.context.pages == []  # the other was closed
    finally:
        await hosts.close()
    assert hosts.pages.n_open == 0


async def test_the_pool_refuses_a_bound_below_one() -> None:
    with pytest.raises(ValueError, match="max_pages"):
        PagePool(max_pages=0)


async def test_fresh_pages_open_at_most_max_opening_at_once(chromium_path: str) -> None:
    from gymfleet.envs.browser.chromium import ChromiumConfig, LocalChromium

    pool = PagePool(max_pages=4, max_idle=0, max_opening=1)
    async with LocalChromium(ChromiumConfig(executable_path=chromium_path)) as host:
        browser = await host.start()
        first = await pool.lease(browser, browser.new_context, {})
        second = asyncio.create_task(pool.lease(browser, browser.new_context, {}))
        for _ in range(20):  # it waits for the first page's load, without I/O
            await asyncio.sleep(0)
        assert not second.done() and pool.opened == 1
        first.loaded()  # the first episode's task page loaded: the next may open
        other = await asyncio.wait_for(second, 60)
        assert pool.opened == 2
        await pool.give_back(first, reusable=False)
        await pool.give_back(other, reusable=False)
        assert pool.n_open == 0
