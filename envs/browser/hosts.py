"""The Chromium hosts of one :class:`~gymfleet.envs.resources.EnvResources` (``resources.get(BrowserHosts)``).

One started :class:`~gymfleet.envs.browser.chromium.BrowserHost` per browser kind and Chromium
configuration (the MiniWoB, URL-task and slides envs all use the default one, so a process runs
one Chromium however many browser episodes are in flight). Each episode gets a fresh
``BrowserContext`` (its own cookies, storage and pages) and closes it when it ends; a Chromium
that died is started again at the next context.
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
from gymfleet.envs.errors import SandboxUnavailableError
from gymfleet.envs.resources import EnvResources, SharedResource
from gymfleet.envs.sandbox.base import SandboxLabels


class BrowserHosts(SharedResource):
    """Started Chromium hosts by (kind, configuration), and the contexts open on them: the
    browser family's shared resource, closed with the resources.

    Args:
        run_id: labels a Docker host's container (so the reaper finds it if this process dies).
    """

    def __init__(self, run_id: str = "adhoc") -> None:
        self.run_id = run_id
        self._hosts: dict[tuple[str, ...], BrowserHost] = {}
        self._auto: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self._contexts: set[Any] = set()

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
        context = await browser.new_context(**options)
        self._contexts.add(context)
        context.on("close", lambda _: self._contexts.discard(context))
        return context

    def open_contexts(self) -> int:
        """Contexts made here and not closed yet."""
        return len(self._contexts)

    def n_hosts(self) -> int:
        """Hosts whose Chromium is running."""
        return sum(1 for host in self._hosts.values() if host.running)

    def counters(self) -> Mapping[str, int]:
        return {"browser_contexts": self.open_contexts(), "chromium_hosts": self.n_hosts()}

    async def close(self) -> None:
        """Closes every host (and with it every context). Idempotent."""
        hosts, self._hosts = list(self._hosts.values()), {}
        self._contexts.clear()
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
