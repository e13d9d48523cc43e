"""What an episode's page may load: its own folder or origin, never the host's other files or
another origin's text.

A task page runs its own scripts, and the local Chromium reads this machine's disk and network:
unguarded, ``location = "file:///etc/shadow"``, a ``fetch`` of an internal service that allows
every origin, or a frame of ``/root`` would put their contents into the observation (and so
into the trajectory store). :class:`PageGuard` is a Playwright route handler on the episode's
context (``context.route("**/*", guard.handle)``), consulted for every request of every frame:

- ``file:`` URLs only under the folders the browser serves pages from (MiniWoB's, the env's
  ``pages_dirs``) and the folder of the task's own start page;
- ``http(s)``/``ws(s)`` navigations (any frame) and reads (``fetch``, XHR, event sources, web
  sockets) only to the origin of the task's start page; other cross-origin subresources
  (images, styles, scripts, fonts) load, as their bytes never become page text;
- ``data:``, ``blob:`` and ``about:`` always; every other scheme never.

The first main-frame navigation of the episode (the task's own ``goto``) sets the allowed
origin or folder; :meth:`PageGuard.lock` ends that once the task has started. A refused request
is aborted (``blockedbyclient``): a refused navigation leaves Chromium's error page, which
names the URL and nothing of its contents.
"""

from __future__ import annotations

import posixpath
import urllib.parse
from typing import Any

READS = frozenset({"fetch", "xhr", "eventsource", "websocket"})
"""Resource types whose bytes a page script reads back as text."""
ALWAYS = frozenset({"data", "blob", "about"})
WEB = frozenset({"http", "https", "ws", "wss"})


def _file_path(url: str) -> str:
    return posixpath.normpath(urllib.parse.unquote(urllib.parse.urlsplit(url).path) or "/")


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

    async def handle(self, route: Any) -> None:
        """Playwright's route handler: continues an allowed request, aborts the rest."""
        request = route.request
        navigation = request.is_navigation_request()
        try:
            main = navigation and request.frame.parent_frame is None
        except Exception:  # a service worker's request has no frame
            main = False
        allowed = self.allows(request.url, request.resource_type, navigation, main)
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
        if self.allows(socket.url, "websocket", False, False):
            socket.connect_to_server()
            return
        self.refused.append(socket.url[:200])
        await socket.close(code=1008, reason="refused by gymfleet")
