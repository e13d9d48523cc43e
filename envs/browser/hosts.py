"""The Chromium hosts of one :class:`~gymfleet.envs.resources.EnvResources` (``resources.get(BrowserHosts)``).

One started :class:`~gymfleet.envs.browser.chromium.BrowserHost` per browser kind and Chromium
configuration (the MiniWoB, URL-task and slides envs all use the default one, so a process runs
one Chromium however many browser episodes are in flight). Each episode leases its own
``BrowserContext`` and page from a bounded :class:`~gymfleet.envs.browser.pages.PagePool`: a
fresh one, or one a finished episode gave back and that was scrubbed (storage, cookies,
history, ``window.name`` gone); a Chromium that died is started again at the next lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from gymfleet.envs.browser.chromium import (
    HOSTS,
    BrowserHost,
    ChromiumConfig,
    DockerChromium,
    docker_ready,
)
from gymfleet.envs.browser.pages import PagePool, PageSlot
from gymfleet.envs.errors import SandboxUnavailableError
from gymfleet.envs.resources import EnvResources, SharedResource
from gymfleet.envs.sandbox.base import SandboxLabels


class BrowserHosts(SharedResource):
    """Started Chromium hosts by (kind, configuration), and the contexts open on them: the
    browser family's shared resource, closed with the resources.

    Args:
        run_id: labels a Docker host's container (so the reaper finds it if this process dies).
        max_pages: episode pages (contexts) open at once over every host, leased or idle; a
            lease beyond it waits for one to come back.
        max_idle_pages: scrubbed pages kept for the next episodes.
    """

    def __init__(self, run_id: str = "adhoc", max_pages: int = 256, max_idle_pages: int = 64) -> None:
        self.run_id = run_id
        self._hosts: dict[tuple[str, ...], BrowserHost] = {}
        self._auto: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self.pages = PagePool(max_pages, max_idle_pages)

    @classmethod
    def create(cls, resources: EnvResources) -> Self:
        return cls(resources.run_id)

    async def host(self, kind: str = "local", chromium: ChromiumConfig | None = None,
                   pages_dirs: tuple[Path, ...] = ()) -> BrowserHost:
        """The started host of ``kind`` (``local``, ``docker``, ``auto``) and ``chromium``.

        Args:
            pages_dirs: folders a Docker host copies in (a local Chromium reads the disk).

        Raises:
            SandboxUnavailableError: an unknown kind, or its backend is missing.
            BrowserStartError: Chromium did not start.
        """
        chromium = chromium or ChromiumConfig()
        kind = await self._resolve(kind, chromium)
        if kind not in HOSTS:
            raise SandboxUnavailableError(
                f"unknown browser sandbox {kind!r}; choose one of auto, {', '.join(HOSTS)}")
        key: tuple[str, ...] = (kind, chromium.model_dump_json())
        if kind == "docker":
            key += tuple(str(Path(p).resolve()) for p in pages_dirs)
        async with self._lock:
            host = self._hosts.get(key)
            if host is None:
                if kind == "docker":
                    host = DockerChromium(chromium, pages_dirs, SandboxLabels(run_id=self.run_id))
                else:
                    host = HOSTS[kind](chromium, pages_dirs)
                self._hosts[key] = host
        await host.start()  # once; again after a crash
        return host

    async def browser(self, kind: str = "local", chromium: ChromiumConfig | None = None) -> Any:
        """The Playwright ``Browser`` of :meth:`host` (started)."""
        return await (await self.host(kind, chromium)).start()

    async def new_context(self, host: BrowserHost, **options: Any) -> Any:
        """A fresh ``BrowserContext`` on ``host`` (``options`` as Playwright's ``new_context``);
        the caller closes it when its episode ends."""
        browser = await host.start()
        return await browser.new_context(**options)

    async def lease_page(self, host: BrowserHost, page_key: str | None = None, **options: Any) -> PageSlot:
        """An episode's context and page on ``host`` (``options`` as Playwright's
        ``new_context``), from the pool; give it back with :meth:`give_back_page`. With
        ``page_key`` (the task page the episode loads), a page still holding it comes first
        (:attr:`PageSlot.holding`).

        Raises:
            BrowserStartError: Chromium did not start.
            playwright.async_api.Error: the context could not be opened.
        """
        browser = await host.start()
        return await self.pages.lease(browser, lambda **o: self.new_context(host, **o), options, page_key)

    async def give_back_page(self, slot: PageSlot, reusable: bool) -> None:
        """Ends a lease: the slot is scrubbed and kept when ``reusable`` (the episode ended
        cleanly), else closed. Never raises."""
        await self.pages.give_back(slot, reusable)

    def open_contexts(self) -> int:
        """Contexts held by running episodes now (idle pooled ones not counted)."""
        return self.pages.n_leased

    def idle_contexts(self) -> int:
        """Scrubbed contexts waiting in the pool."""
        return self.pages.n_idle

    def n_hosts(self) -> int:
        """Hosts whose Chromium is running."""
        return sum(1 for host in self._hosts.values() if host.running)

    def counters(self) -> Mapping[str, int]:
        return {"browser_contexts": self.open_contexts(), "browser_contexts_idle": self.idle_contexts(),
                "chromium_hosts": self.n_hosts(), "browser_pages_opened": self.pages.opened,
                "browser_pages_reused": self.pages.reused,
                "browser_pages_reused_holding_task": self.pages.reused_holding}

    async def close(self) -> None:
        """Closes every host (and with it every context). Idempotent."""
        hosts, self._hosts = list(self._hosts.values()), {}
        await self.pages.close()
        await asyncio.gather(*(host.close() for host in hosts), return_exceptions=True)

    async def aclose(self) -> None:
        await self.close()

    async def _resolve(self, kind: str, chromium: ChromiumConfig) -> str:
        if kind != "auto":
            return kind
        if chromium.image not in self._auto:
            ready = await asyncio.to_thread(docker_ready, chromium)
            self._auto[chromium.image] = "docker" if ready else "local"
        return self._auto[chromium.image]
