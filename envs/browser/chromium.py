"""Where Chromium runs: a local process, or a container reached over the DevTools protocol.

A :class:`BrowserHost` starts one Chromium and hands out its Playwright ``Browser``; envs open
one ``BrowserContext`` each on it, so many episodes can share one Chromium. Hosts are picked by
name from :data:`HOSTS` (``local``, ``docker``); ``auto`` means Docker when its daemon answers
and the ``gymfleet/browser`` image is present, else local.

Files the pages need (the MiniWoB HTML) live on this machine; :meth:`BrowserHost.file_url`
turns such a path into the URL the browser must load: ``file://`` for a local Chromium, a path
inside the container (where :class:`DockerChromium` copies them at start) for Docker.
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import socket
import tarfile
import time
from abc import ABC, abstractmethod
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, runtime_checkable

import httpx
from pydantic import Field

from gymfleet.core.strict import StrictModel
from gymfleet.envs.browser.errors import BrowserStartError
from gymfleet.envs.errors import SandboxUnavailableError
from gymfleet.envs.needs import MachineNeed
from gymfleet.envs.sandbox.base import SandboxLabels, owner_labels

DEFAULT_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    # Deterministic rendering, which the slides grader needs; one switch set for every env, so
    # that the browser and slides envs of a process share one Chromium.
    "--hide-scrollbars",
    "--font-render-hinting=none",
    # One renderer per episode context, kept across its episodes: without these, each episode's
    # navigations (about:blank at the scrub, then the task page) start a new renderer process
    # (about 0.06 CPU-s of the 0.3 a reused page's reset costs, docs/performance.md, MiniWoB).
    # Renderers are never shared between contexts, so episodes still share no process.
    "--process-per-site",
    "--disable-site-isolation-trials",
    "--disable-features=ProactivelySwapBrowsingInstance,BackForwardCache,RenderDocument",
]
BROWSER_IMAGE = "gymfleet/browser:latest"
CONTAINER_PAGES_DIR = "/opt/gymfleet/pages"
CONTAINER_CDP_PORT = 9222


def chromium_path() -> str | None:
    """The Chromium binary envs will start, when it exists (``GYMFLEET_CHROMIUM``, else Debian's)."""
    path = os.environ.get("GYMFLEET_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    return path if path and os.path.exists(path) else None


CHROMIUM = MachineNeed("chromium", "Chromium binary (Debian's chromium, or GYMFLEET_CHROMIUM)",
                       "apt-get install chromium (make services) or set GYMFLEET_CHROMIUM",
                       lambda: chromium_path() is not None)
"""The browser family's machine need (``requires = {"chromium"}``; the slides family's too)."""


def _default_chromium() -> str:
    return os.environ.get("GYMFLEET_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


class ChromiumConfig(StrictModel):
    """How to start Chromium."""

    executable_path: str = Field(default_factory=_default_chromium)
    """Local backend: the Chromium binary (Debian's; ``playwright install`` is never needed)."""
    args: list[str] = Field(default_factory=lambda: list(DEFAULT_ARGS))
    """Local backend: command-line switches of the Chromium process."""
    start_timeout_s: float = 30.0
    """Seconds to wait for Chromium (process or container) to answer."""
    image: str = BROWSER_IMAGE
    """Docker backend: the image (built from images/browser/Dockerfile)."""
    memory_mb: int = 2048
    """Docker backend: memory limit of the container, MiB."""
    cpus: float = 2.0
    """Docker backend: CPU limit of the container, cores."""
    pids_limit: int = 512
    """Docker backend: most processes in the container."""
    network: bool = False
    """Docker backend: let Chromium reach outside hosts (URL tasks on real sites)."""
    ttl_s: float = 6 * 3600.0
    """Docker backend: seconds after which the reaper may remove the container."""


@runtime_checkable
class BrowserHost(Protocol):
    """One Chromium, local or in a container. Use as an async context manager."""

    name: str
    isolated: bool

    @property
    def running(self) -> bool:
        """True while Chromium is started and connected."""
        ...

    async def start(self) -> Any:
        """Starts Chromium (once, and again after it died) and returns its Playwright async
        ``Browser``.

        Raises:
            BrowserStartError: Chromium did not start or did not answer in time.
            SandboxUnavailableError: the backend is missing (no Docker daemon, no image).
        """
        ...

    def file_url(self, path: Path) -> str:
        """The URL at which this browser loads ``path``, a file under a folder it serves."""
        ...

    async def close(self) -> None:
        """Closes the browser and everything it runs on. Idempotent."""
        ...


class _HostBase(ABC):
    """Context-manager plumbing and the Playwright driver, shared by the hosts."""

    name = "base"
    isolated = False

    def __init__(self, config: ChromiumConfig | None = None, pages_dirs: tuple[Path, ...] = ()):
        self.config = config or ChromiumConfig()
        self.pages_dirs = tuple(Path(p).resolve() for p in pages_dirs)
        self._playwright: Any = None
        self._browser: Any = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> _HostBase:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def running(self) -> bool:
        return self._browser is not None and self._browser.is_connected()

    async def start(self) -> Any:
        async with self._lock:
            if self._browser is not None and not self._browser.is_connected():
                await self.close()  # Chromium died (crashed, killed): start a fresh one
            if self._browser is None:
                from playwright.async_api import async_playwright

                self._playwright = await async_playwright().start()
                try:
                    self._browser = await self._launch(self._playwright)
                except BaseException:
                    await self.close()
                    raise
            return self._browser

    @abstractmethod
    async def _launch(self, playwright: Any) -> Any:
        """Starts Chromium and returns the connected Playwright ``Browser``."""

    @abstractmethod
    def file_url(self, path: Path) -> str:
        """See :meth:`BrowserHost.file_url`."""

    async def close(self) -> None:
        browser, self._browser = self._browser, None
        playwright, self._playwright = self._playwright, None
        try:
            if browser is not None and browser.is_connected():
                await browser.close()
        finally:
            if playwright is not None:
                await playwright.stop()


class LocalChromium(_HostBase):
    """Chromium as a child process of this one, launched by Playwright (not isolated)."""

    name = "local"

    async def _launch(self, playwright: Any) -> Any:
        exe = self.config.executable_path
        if not Path(exe).exists():
            raise SandboxUnavailableError(
                f"Chromium not found at {exe}: apt-get install chromium (make services), "
                "or set GYMFLEET_CHROMIUM to its path"
            )
        try:
            return await playwright.chromium.launch(
                executable_path=exe,
                headless=True,
                args=self.config.args,
                timeout=self.config.start_timeout_s * 1000,
            )
        except Exception as exc:
            raise BrowserStartError(f"Chromium at {exe} did not start: {exc}") from exc

    def file_url(self, path: Path) -> str:
        return Path(path).resolve().as_uri()


class DockerChromium(_HostBase):
    """Chromium in a ``gymfleet/browser`` container, reached over CDP on a 127.0.0.1 port.

    The container carries the sandboxes' ``gymfleet.*`` labels (run, rollout, expiry, owner
    pid, host), so the Docker backend's reaper removes it if this process dies. The pages
    are copied in at start; Chromium inside reaches no outside network unless
    ``config.network``.
    """

    name = "docker"
    isolated = True

    def __init__(
        self,
        config: ChromiumConfig | None = None,
        pages_dirs: tuple[Path, ...] = (),
        labels: SandboxLabels | None = None,
    ) -> None:
        super().__init__(config, pages_dirs)
        self.labels = labels or SandboxLabels()
        self._container: Any = None

    async def _launch(self, playwright: Any) -> Any:
        self._container, port = await asyncio.to_thread(self._start_container)
        endpoint = f"http://127.0.0.1:{port}"
        await self._wait_for_cdp(endpoint)
        try:
            return await playwright.chromium.connect_over_cdp(
                endpoint, timeout=self.config.start_timeout_s * 1000
            )
        except Exception as exc:
            raise BrowserStartError(f"could not connect to Chromium at {endpoint}: {exc}") from exc

    def _start_container(self) -> tuple[Any, int]:
        import docker

        from gymfleet.envs.images import ensure_image

        tag = _image_tag(self.config.image, ensure_image)
        labels = self.labels.with_expiry(self.config.ttl_s)
        container = docker.from_env(timeout=60).containers.run(
            tag,
            detach=True,
            name=f"gymfleet-browser-{labels.run_id}-{labels.rollout_id}",
            labels=labels.as_dict()
            | owner_labels(),
            ports={f"{CONTAINER_CDP_PORT}/tcp": ("127.0.0.1", None)},
            environment={"GYMFLEET_BROWSER_NETWORK": "1" if self.config.network else "0"},
            nano_cpus=int(self.config.cpus * 1e9),
            mem_limit=f"{self.config.memory_mb}m",
            pids_limit=self.config.pids_limit,
            shm_size="256m",
            init=True,
        )
        try:
            if self.pages_dirs:
                container.put_archive(CONTAINER_PAGES_DIR, _tar_dirs(self.pages_dirs))
            container.reload()
            port = int(container.ports[f"{CONTAINER_CDP_PORT}/tcp"][0]["HostPort"])
        except Exception:
            container.remove(force=True)
            raise
        return container, port

    async def _wait_for_cdp(self, endpoint: str) -> None:
        deadline = time.monotonic() + self.config.start_timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                try:
                    response = await client.get(f"{endpoint}/json/version")
                    if response.status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    logs = await asyncio.to_thread(self._container.logs, tail=20)
                    raise BrowserStartError(
                        f"Chromium in container {self._container.name} did not answer at {endpoint} "
                        f"within {self.config.start_timeout_s:g} s; its log ends:\n{logs.decode(errors='replace')}"
                    )
                await asyncio.sleep(0.2)

    def file_url(self, path: Path) -> str:
        path = Path(path).resolve()
        for i, folder in enumerate(self.pages_dirs):
            if path.is_relative_to(folder):
                inside = PurePosixPath(CONTAINER_PAGES_DIR) / str(i) / path.relative_to(folder).as_posix()
                return inside.as_uri()
        raise BrowserStartError(
            f"{path} is not under a folder copied into the browser container "
            f"({', '.join(map(str, self.pages_dirs)) or 'none'}): pass it in pages_dirs"
        )

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            container, self._container = self._container, None
            if container is not None:
                await asyncio.to_thread(_remove_quietly, container)


def _image_tag(image: str, ensure_image: Any) -> str:
    """Builds ``images/browser`` when the configured image is the project's own; else as given."""
    if image == BROWSER_IMAGE:
        try:
            return str(ensure_image("browser"))
        except Exception as exc:
            raise SandboxUnavailableError(
                f"the browser image could not be built: {exc}. Run `gymfleet images build browser`, "
                "or pass sandbox='local'"
            ) from exc
    return image


def _tar_dirs(folders: tuple[Path, ...]) -> bytes:
    """A tar of each folder as ``<index>/...`` (the layout :meth:`DockerChromium.file_url` maps)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for i, folder in enumerate(folders):
            tar.add(str(folder), arcname=str(i))
    return buffer.getvalue()


def _remove_quietly(container: Any) -> None:
    try:
        container.remove(force=True, v=True)
    except Exception:  # already gone (the reaper, or the daemon restarted)
        pass


# name -> host class; "auto" is resolved by open_host.
HOSTS: dict[str, type[_HostBase]] = {"local": LocalChromium, "docker": DockerChromium}


def open_host(
    sandbox: str = "auto", config: ChromiumConfig | None = None, pages_dirs: tuple[Path, ...] = ()
) -> BrowserHost:
    """A new, not yet started host of kind ``sandbox`` (``auto``, ``local`` or ``docker``).

    Args:
        sandbox: the kind; ``auto`` picks Docker when :func:`docker_ready` says so, else local.
        config: how to start Chromium.
        pages_dirs: folders of this machine whose files the pages load (``file_url``).

    Raises:
        SandboxUnavailableError: an unknown kind.
    """
    if sandbox == "auto":
        sandbox = "docker" if "docker" in HOSTS and docker_ready(config or ChromiumConfig()) else "local"
    try:
        host_cls = HOSTS[sandbox]
    except KeyError:
        raise SandboxUnavailableError(
            f"unknown browser sandbox {sandbox!r}; choose one of auto, {', '.join(HOSTS)}"
        ) from None
    return host_cls(config, pages_dirs)


def docker_ready(config: ChromiumConfig) -> bool:
    """True when a Docker daemon answers and holds the browser image."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        client.images.get(config.image)
        return True
    except Exception:
        return False
