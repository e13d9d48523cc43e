"""What an episode's page may load: its own folder or origin, never the host's other files or
another origin's text.

A task page runs its own scripts, and the local Chromium reads this machine's disk and network:
unguarded, ``location = "file:///etc/shadow"``, a ``fetch`` of an internal service that allows
every origin, or a frame of ``/root`` would put their contents into the observation (and so
into the trajectory store). :class:`PageGuard` is a Playwright route handler on the episode's
context (``context.route("**/*", guard.handle)``), consulted for every request of every frame:

- ``file:`` URLs only under the folders the browser serves pages from (MiniWoB's, the env's
  ``pages_dirs``) and the folder of the task's own start page;
- ``http(s)``/``ws(s)`` navigations (any frame), reads (``fetch``, XHR, event sources, web
  sockets) and scripts only to the origin of the task's start page (a cross-origin script runs
  with the page's rights: a local service serving a secret as JavaScript would hand it over);
  other cross-origin subresources (images, styles, fonts, beacons) load, as their bytes never
  become page text;
- nothing on this host or its private networks, whatever the request (beacons, images, pings
  included): a loopback, private, link-local or unspecified address, ``localhost`` and the names
  this host resolves to such an address, except the task's own origin. gymfleet's own services
  (a replica server on 127.0.0.1) are out of every page's reach;
- ``data:``, ``blob:`` and ``about:`` always; every other scheme never.

The first main-frame navigation of the episode (the task's own ``goto``) sets the allowed
origin or folder; :meth:`PageGuard.lock` ends that once the task has started. A refused request
is aborted (``blockedbyclient``): a refused navigation leaves Chromium's error page, which
names the URL and nothing of its contents.
"""

from __future__ import annotations

import asyncio
import ipaddress
import posixpath
import socket
import urllib.parse
from typing import Any

READS = frozenset({"fetch", "xhr", "eventsource", "websocket", "script"})
"""Resource types whose bytes a page script reads back as text (or runs, for a script)."""
ALWAYS = frozenset({"data", "blob", "about"})
WEB = frozenset({"http", "https", "ws", "wss"})


def _file_path(url: str) -> str:
    return posixpath.normpath(urllib.parse.unquote(urllib.parse.urlsplit(url).path) or "/")


def is_internal_address(address: str) -> bool:
    """Whether an IP address (text) is this host's or a private network's: loopback, private,
    link-local, unspecified, multicast or reserved (IPv4-mapped IPv6 read as its IPv4)."""
    try:
        ip = ipaddress.ip_address(address.strip("[]").split("%")[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_unspecified or ip.is_multicast
            or ip.is_reserved)


async def host_is_internal(host: str, cache: dict[str, bool]) -> bool:
    """Whether ``host`` (an address or a name) is internal (:func:`is_internal_address`); a name
    is resolved (``localhost``, ``/etc/hosts``, DNS) once per guard, and is internal when any of
    its addresses is; a name that does not resolve cannot be reached anyway."""
    host = host.lower().rstrip(".")
    if host in cache:
        return cache[host]
    if host == "localhost" or host.endswith(".localhost"):
        internal = True
    elif _is_ip(host):
        internal = is_internal_address(host)
    else:
        try:
            infos = await asyncio.to_thread(socket.getaddrinfo, host, None)
        except (OSError, UnicodeError):
            infos = []
        internal = any(is_internal_address(str(info[4][0])) for info in infos)
    cache[host] = internal
    return internal


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return False
    return True


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return f"{scheme}://{parts.netloc}"


class PageGuard:
    """Allows or refuses each request of one episode's context.

    Args:
        folders: absolute paths (as the browser sees them: ``file://`` URLs' paths) whose files
            pages may load.
    """

    def __init__(self, folders: list[str]) -> None:
        self.folders = [posixpath.normpath(f) for f in folders]
        self.origin: str | None = None
        self.locked = False
        self.refused: list[str] = []
        self._internal: dict[str, bool] = {}
        self.left_page = False
        """A main-frame navigation was asked for after :meth:`lock` (allowed or refused, it
        replaces the task's document): the page may not start its next episode in place."""

    def lock(self) -> None:
        """Called once the task's page has loaded: no later navigation widens what is allowed."""
        self.locked = True

    def admit(self, url: str) -> None:
        """Allows what the task page at ``url`` may load, as its own first navigation would, and
        locks: for an episode that starts inside a page that already holds its task."""
        self.allows(url, "document", navigation=True, main_frame=True)
        self.lock()

    def allows(self, url: str, resource_type: str, navigation: bool, main_frame: bool) -> bool:
        """Whether a request may go (see the module docstring); the first main-frame navigation
        before :meth:`lock` is the task's own and sets the allowed origin or folder."""
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme in ALWAYS:
            return True
        if navigation and main_frame and not self.locked and self.origin is None:
            self.origin = _origin(url) if scheme in WEB else None
            if scheme == "file":
                self.folders.append(posixpath.dirname(_file_path(url)))
            return scheme in WEB or scheme == "file"
        if scheme == "file":
            path = _file_path(url)
            return any(path == f or path.startswith(f.rstrip("/") + "/") for f in self.folders)
        if scheme in WEB:
            return _origin(url) == self.origin or not (navigation or resource_type in READS)
        return False

    async def reaches_host(self, url: str) -> bool:
        """Whether ``url`` goes to this host or a private network, other than the task's own
        origin (checked for every ``http(s)``/``ws(s)`` request, whatever its type)."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme.lower() not in WEB or not parts.hostname or _origin(url) == self.origin:
            return False
        return await host_is_internal(parts.hostname, self._internal)

    async def handle(self, route: Any) -> None:
        """Playwright's route handler: continues an allowed request, aborts the rest."""
        request = route.request
        navigation = request.is_navigation_request()
        try:
            main = navigation and request.frame.parent_frame is None
        except Exception:  # a service worker's request has no frame
            main = False
        allowed = self.allows(request.url, request.resource_type, navigation, main)
        if allowed and await self.reaches_host(request.url):
            allowed = False
        if main and self.locked:
            self.left_page = True
        if not allowed:
            self.refused.append(request.url[:200])
        try:
            await (route.continue_() if allowed else route.abort("blockedbyclient"))
        except Exception:  # the page or its context closed meanwhile: nothing left to route
            pass

    async def handle_socket(self, socket: Any) -> None:
        """Playwright's web socket route: connects only to the page's own origin."""
        if self.allows(socket.url, "websocket", False, False) and not await self.reaches_host(socket.url):
            socket.connect_to_server()
            return
        self.refused.append(socket.url[:200])
        await socket.close(code=1008, reason="refused by gymfleet")
