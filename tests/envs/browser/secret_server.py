"""A loopback HTTP server that answers every GET with one fixed body: the secret a hostile page
tries to read (tests/envs/browser/test_hostile_reads.py, test_host_reach.py)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def secret_server(body: bytes, headers: dict[str, str]) -> Iterator[str]:
    """Serves ``body`` with ``headers`` (and its Content-Length) on 127.0.0.1; yields the base URL
    (``http://127.0.0.1:PORT``) and stops the server on exit."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
