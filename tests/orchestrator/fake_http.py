"""A tiny misbehaving HTTP replica (stdlib http.server in a thread) for the VLLMEngine/router tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMPLETION = {
    "id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m",
    "choices": [{
        "index": 0, "text": "hi", "finish_reason": "stop", "stop_reason": None,
        "logprobs": {"tokens": ["token_id:42", "token_id:2"], "token_logprobs": [-0.5, -0.1],
                     "top_logprobs": None, "text_offset": None},
    }],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1}},
}


@contextmanager
def fake_replica(mode: str) -> Iterator[str]:
    """Serves ``/health`` (200) and answers every POST according to ``mode``.

    Modes: ``"500"`` (internal error), ``"hang"`` (never answers until shut down), ``"vllm"``
    (a canned vLLM completion), ``"404"`` (vLLM's unknown-model error), ``"garbage"`` (200, not JSON).
    Yields the base URL.
    """
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(200, b"")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if mode == "hang":
                release.wait(60)
                return
            if mode == "500":
                self._send(500, b'{"error": {"message": "boom", "type": "InternalServerError", "code": 500}}')
            elif mode == "404":
                self._send(404, b'{"object": "error", "message": "The model `x` does not exist.", "code": 404}')
            elif mode == "garbage":
                self._send(200, b"<html>proxy</html>", "text/html")
            else:
                self._send(200, json.dumps(COMPLETION).encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.block_on_close = False
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        release.set()
        server.shutdown()
        server.server_close()
