"""Episode pages: one ``BrowserContext`` and page per browser episode, and a bounded pool that
reuses them across episodes, scrubbed in between.

Opening a context and its page costs Chromium a renderer process (two, with the first
navigation's) and about 1.3 CPU-s with the task page's load and the episode's first reset; a
reused page's whole reset, scrub included, about 0.25 to 0.3, and one restarted in place about
0.015 to 0.02 (``docs/performance.md``, MiniWoB). An episode's page is an adversary's: a policy
acts on it, and the page's scripts may keep whatever the policy made them write. A slot
returns to the pool only after :meth:`PageSlot.scrub` removed every trace of the episode:

- the document: the page goes to ``about:blank`` (the task's scripts, timers, sockets and
  workers stop with it), then ``window.name`` (which survives navigation) is emptied there;
- the history: ``Page.resetNavigationHistory`` (no ``back`` to the last episode's page);
- storage of every origin the episode's page loaded from (``file://`` and the guard's origin):
  ``Storage.clearDataForOrigin`` with ``all`` (local and session storage, IndexedDB, cache
  storage, service workers, file systems), then the context's cookies and permissions;
- requests: until the next episode's guard takes over, the slot's guard refuses everything
  but ``about:``/``data:``/``blob:``.

A slot whose episode ended in an error, a hang (``step_timeout_s``) or whose scrub failed is
closed, never reused. Episodes in flight at once each hold their own slot: nothing is shared
between concurrent episodes but the Chromium process.

A task that can start its next episode inside its loaded page (MiniWoB's in-page reset,
``BrowserTask.page_key``) skips the scrub and the reload: a slot whose episode ended cleanly
on such a page goes back to the pool still holding it (:attr:`PageSlot.holding`), and the next
lease for the same page takes it first (affinity). It is handed out holding the page only if
its document is still the one the task loaded (a Playwright handle to that ``document``,
which no page script can forge, still resolves to the page's current ``document``) and no
main-frame navigation was asked for since (:attr:`PageGuard.left_page`); any other lease, or a
failed check, scrubs it first, as above. The task's restart then regenerates everything an
episode shows (``miniwob.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from gymfleet.envs.browser.guard import PageGuard

_CLEAR_NAME_JS = "() => { window.name = ''; }"
_SAME_DOCUMENT_JS = "(d) => d === document && document.readyState === 'complete'"


def _blank_guard() -> PageGuard:
    guard = PageGuard([])
    guard.lock()  # no origin, no folder: only about:, data: and blob: load
    return guard


class PageSlot:
    """One context with one page, leased by one episode at a time.

    Attributes:
        context: the Playwright ``BrowserContext``.
        page: its page (the episode's own; any other page is closed as soon as it opens).
        guard: the :class:`PageGuard` every request of the context goes through (the leasing
            episode's own while leased).
        popups_closed: pages opened by the page and closed since the slot was leased.
        episodes: episodes this slot served (1 for a fresh one).
        holding: the task page (its ``BrowserTask.page_key``) the page still holds, loaded and
            not scrubbed, for the next episode of that task to start in place; None when
            blank (fresh or scrubbed).
    """

    def __init__(self, browser: Any, context: Any, page: Any, key: str) -> None:
        self.browser, self.context, self.page, self.key = browser, context, page, key
        self.guard = _blank_guard()
        self.popups_closed = 0
        self.episodes = 0
        self.close_timeout_s = 30.0
        self.holding: str | None = None
        self._document: Any = None
        self._on_loaded: Callable[[], None] | None = None

    @classmethod
    async def open(cls, browser: Any, new_context: Callable[..., Awaitable[Any]],
                   options: dict[str, Any]) -> PageSlot:
        """A fresh slot: ``await new_context(**options)`` and its page, routed through the slot's
        guard, popups closed."""
        context = await new_context(**options)
        try:
            slot = cls(browser, context, None, json.dumps(options, sort_keys=True, default=str))
            await context.route("**/*", slot._route)
            await context.route_web_socket("**/*", slot._route_socket)
            slot.page = await context.new_page()
            context.on("page", slot._close_popup)  # after the slot's own page exists
        except BaseException:
            await _close_quietly(context, 30.0)
            raise
        return slot

    @property
    def alive(self) -> bool:
        """The browser is connected and the slot's page open."""
        return self.browser.is_connected() and self.page is not None and not self.page.is_closed()

    def begin(self, guard: PageGuard, action_timeout_s: float) -> None:
        """Hands the slot to an episode: its guard decides every request from now on."""
        self.guard, self.popups_closed = guard, 0
        self.episodes += 1
        self.context.set_default_timeout(action_timeout_s * 1000)
        self.page.set_default_timeout(action_timeout_s * 1000)

    def loaded(self) -> None:
        """Called once the episode's task page loaded (or failed to): a fresh slot's first load
        (its renderer's start) no longer counts against the pool's ``max_opening``."""
        release, self._on_loaded = self._on_loaded, None
        if release is not None:
            release()

    async def hold(self, page_key: str) -> None:
        """Marks the page as holding the task page ``page_key`` that was just loaded in it: the
        next episode of that task may start in place while this document lives.

        Raises:
            playwright.async_api.Error: the page failed.
        """
        if self.holding == page_key and self._document is not None:
            return  # restarted in place: the same document, checked at the lease
        self.holding, self._document = None, None
        self._document = await self.page.evaluate_handle("() => document")
        self.holding = page_key

    async def holds(self, page_key: str) -> bool:
        """Whether the page still holds ``page_key``'s document as loaded: the same document (the
        handle taken by :meth:`hold` is that of the current ``document``), fully loaded, and no
        main-frame navigation asked for since. Never raises (a failed check is False)."""
        if self.holding != page_key or self._document is None or not self.alive or self.guard.left_page:
            return False
        try:
            return bool(await self.page.evaluate(_SAME_DOCUMENT_JS, self._document))
        except Exception:  # the document's context is gone (it navigated) or the page failed
            return False

    async def scrub(self, timeout_s: float) -> None:
        """Removes every trace of the last episode (see the module docstring).

        Raises:
            TimeoutError: it took more than ``timeout_s``.
            playwright.async_api.Error: the page or browser failed (the slot must be closed).
        """
        origins = {"file://"} | ({self.guard.origin} if self.guard.origin else set())
        self.guard = _blank_guard()
        self.holding, self._document = None, None
        async with asyncio.timeout(timeout_s):
            for page in self.context.pages:
                if page is not self.page:
                    await page.close(run_before_unload=False)
            await self.page.goto("about:blank")
            await self.page.evaluate(_CLEAR_NAME_JS)
            cdp = await self.context.new_cdp_session(self.page)
            try:
                await cdp.send("Page.resetNavigationHistory")
                for origin in sorted(origins):
                    await cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
                if len(origins) > 1:  # a web origin: its HTTP cache too
                    await cdp.send("Network.clearBrowserCache")
            finally:
                await cdp.detach()
            await self.context.clear_cookies()
            await self.context.clear_permissions()

    async def close(self) -> None:
        """Closes the context (and its renderer). Idempotent, never raises."""
        self.loaded()
        self.guard = _blank_guard()
        await _close_quietly(self.context, self.close_timeout_s)

    async def _route(self, route: Any) -> None:
        await self.guard.handle(route)

    async def _route_socket(self, socket: Any) -> None:
        await self.guard.handle_socket(socket)

    async def _close_popup(self, page: Any) -> None:
        """Closes every page but the slot's own as soon as it opens (``window.open``,
        ``target=_blank``): a page cannot pile up tabs, and the agent sees one page."""
        if page is self.page:
            return
        self.popups_closed += 1
        try:
            await asyncio.wait_for(page.close(run_before_unload=False), 5.0)
        except Exception:  # already closed, or its context went: nothing left to close
            pass


async def _close_quietly(context: Any, timeout_s: float) -> None:
    try:
        await asyncio.wait_for(context.close(), timeout_s)
    except Exception:  # the browser may already be gone; nothing left to release
        pass


class PagePool:
    """At most ``max_pages`` slots open at once (leased and idle together); idle ones kept for
    reuse, at most ``max_idle`` of them.

    A lease takes an idle slot of the same context options (first one still holding the
    leasing task's page, then a scrubbed one, then, once ``max_spare`` are idle, one holding
    another page, scrubbed first), else opens one; at ``max_pages`` it closes an idle slot of
    other options, else waits for a slot to come back. Slots of a host whose Chromium died are dropped when met. At most ``max_opening``
    fresh slots are between their opening and their first page's load (:meth:`PageSlot.loaded`):
    a fresh context's first load starts a renderer (about 0.8 CPU-s), and a start-up wave of
    64 of them at once on two cores leaves every one past its ``start_timeout_s``; queued,
    each loads in time.

    Args:
        max_pages: slots open at once, leased or idle (each is a renderer process).
        max_idle: scrubbed slots kept waiting for the next episode.
        max_opening: fresh slots opening or loading their first page at once.
        scrub_timeout_s: seconds a scrub may take before the slot is closed instead.
        max_spare: idle slots below which a lease for a task page none of them holds opens a
            fresh slot rather than scrub one holding another task's page. With as many slots
            as episodes in flight, the one idle slot is usually the last episode's, of another
            task; a few spare (each a renderer, about 55 MiB PSS) keep each task's pages for it.
    """

    def __init__(self, max_pages: int = 256, max_idle: int = 64, max_opening: int = 4,
                 scrub_timeout_s: float = 15.0, max_spare: int = 16) -> None:
        if max_pages < 1 or max_idle < 0 or max_opening < 1 or max_spare < 0:
            raise ValueError(f"max_pages and max_opening must be >= 1, max_idle and max_spare >= 0, "
                             f"got {max_pages}, {max_opening}, {max_idle}, {max_spare}")
        self.max_pages, self.max_idle, self.scrub_timeout_s = max_pages, max_idle, scrub_timeout_s
        self.max_spare = max_spare
        self._opening = asyncio.Semaphore(max_opening)
        self._idle: list[PageSlot] = []
        self._open = 0
        self._leased = 0
        self._changed = asyncio.Condition()
        self.opened = 0
        self.reused = 0
        self.reused_holding = 0
        """Leases that got a slot still holding the leasing task's page (its episode may start
        in place)."""

    @property
    def n_open(self) -> int:
        """Slots open now, leased or idle (never above ``max_pages``)."""
        return self._open

    @property
    def n_leased(self) -> int:
        """Slots held by episodes now."""
        return self._leased

    @property
    def n_idle(self) -> int:
        return len(self._idle)

    async def lease(self, browser: Any, new_context: Callable[..., Awaitable[Any]],
                    options: dict[str, Any], page_key: str | None = None) -> PageSlot:
        """A slot on ``browser`` with ``options``: an idle one (still holding ``page_key``'s
        page when one does and its check passes, else scrubbed), or a fresh one.

        Args:
            page_key: the task page the leasing episode will load (``BrowserTask.page_key``);
                None for a task that always loads afresh.

        Raises:
            playwright.async_api.Error: the context could not be opened.
        """
        key = json.dumps(options, sort_keys=True, default=str)
        while True:
            async with self._changed:
                slot, victim = self._take(browser, key, page_key)
                if slot is None and victim is None and self._open >= self.max_pages:
                    await self._changed.wait()
                    continue
                if slot is None:
                    self._open += 1  # a place for a fresh slot (the victim's, if any)
                self._leased += 1
            if victim is not None:
                await victim.close()
            if slot is not None:
                if await self._ready(slot, page_key):
                    self.reused += 1
                    return slot
                await self._forget(leased=True)  # closed: look again
                continue
            return await self._open_slot(browser, new_context, options)

    async def _ready(self, slot: PageSlot, page_key: str | None) -> bool:
        """Readies an idle slot for a lease for ``page_key``: kept holding that page when the
        check passes, else scrubbed; False (the slot closed) when the scrub failed."""
        if slot.holding is None:
            return True
        if page_key is not None and await slot.holds(page_key):
            self.reused_holding += 1
            return True
        try:
            await slot.scrub(self.scrub_timeout_s)
            return True
        except Exception:  # a page that will not go blank is closed, never reused
            await slot.close()
            return False

    async def _open_slot(self, browser: Any, new_context: Callable[..., Awaitable[Any]],
                         options: dict[str, Any]) -> PageSlot:
        try:
            await self._opening.acquire()
            try:
                slot = await PageSlot.open(browser, new_context, options)
            except BaseException:
                self._opening.release()
                raise
        except BaseException:
            await self._forget(leased=True)
            raise
        slot._on_loaded = self._opening.release
        self.opened += 1
        return slot

    def _take(self, browser: Any, key: str, page_key: str | None) -> tuple[PageSlot | None, PageSlot | None]:
        """(an idle slot to reuse, an idle slot to close for room); dead idle slots are dropped.
        Among idle slots of ``key``: one holding ``page_key`` first, then a blank one (no
        scrub to pay), then any."""
        dead = [s for s in self._idle if not s.alive]
        for s in dead:
            self._idle.remove(s)
            self._open -= 1
        fitting = [s for s in self._idle if s.key == key and s.browser is browser]
        if fitting:
            rank = {page_key: 0, None: 1} if page_key is not None else {None: 0}
            slot = min(fitting, key=lambda s: rank.get(s.holding, 2))
            spare = page_key is not None and len(fitting) < self.max_spare and self._open < self.max_pages
            if rank.get(slot.holding, 2) < 2 or not spare:
                self._idle.remove(slot)
                return slot, None
            return None, None  # a fresh one: the idle pages stay with their tasks
        if self._open >= self.max_pages and self._idle:
            self._open -= 1
            return None, self._idle.pop(0)
        return None, None

    async def give_back(self, slot: PageSlot, reusable: bool) -> None:
        """Returns a leased slot: kept when ``reusable`` (its episode ended cleanly) and room is
        left, else closed; kept holding its task page when it holds one (:meth:`PageSlot.hold`)
        and no main-frame navigation was asked for, else scrubbed. Never raises."""
        slot.loaded()
        keep = reusable and slot.alive and len(self._idle) < self.max_idle
        holding = keep and slot.holding is not None and not slot.guard.left_page
        if keep and not holding:  # kept holding its task page: scrubbed when leased for another
            try:
                await slot.scrub(self.scrub_timeout_s)
            except Exception:  # a page that will not go blank is closed, never reused
                keep = False
        if not keep:
            await slot.close()
        async with self._changed:
            self._leased -= 1
            if keep and len(self._idle) < self.max_idle:
                self._idle.append(slot)
            else:
                self._open -= 1
                if keep:
                    await slot.close()
            self._changed.notify_all()

    async def _forget(self, leased: bool) -> None:
        async with self._changed:
            self._open -= 1
            self._leased -= int(leased)
            self._changed.notify_all()

    async def close(self) -> None:
        """Closes every idle slot (leased ones close with their episode or their browser)."""
        async with self._changed:
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._changed.notify_all()
        await asyncio.gather(*(s.close() for s in idle))
