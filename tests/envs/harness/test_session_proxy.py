"""The session proxy alone (on a plain loopback socket, an aiohttp app as the gateway): every path
lands under its one session's root, streamed answers pass through, and calls past ``max_calls``
get 429 without reaching the gateway."""

from __future__ import annotations

import socket

import aiohttp
from aiohttp import web

from gymfleet.envs.harness.session_proxy import SessionProxy


async def test_paths_land_under_the_session_and_max_calls_is_enforced() -> None:
    seen: list[str] = []

    async def gateway(request: web.Request) -> web.StreamResponse:
        seen.append(request.path)
        if not request.path.startswith("/s/mine/v1/"):
            return web.json_response({"error": "no such session"}, status=404)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for n in range(3):
            await response.write(f"data: {n}\n\n".encode())
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", gateway)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    proxy_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        async with SessionProxy(sock, f"http://127.0.0.1:{port}/s/mine", max_calls=2) as proxy, \
                aiohttp.ClientSession() as client:
            async with client.post(f"{proxy_url}/v1/responses", json={}) as r:
                assert r.status == 200 and await r.text() == "data: 0\n\ndata: 1\n\ndata: 2\n\n"
            async with client.post(f"{proxy_url}/s/theirs/v1/responses", json={}) as r:
                assert r.status == 404  # another session's URL lands under this one's root
            async with client.post(f"{proxy_url}/v1/responses", json={}) as r:
                assert r.status == 429 and "limit of 2 model calls" in (await r.json())["error"]["message"]
        assert seen == ["/s/mine/v1/responses", "/s/mine/s/theirs/v1/responses"]
        assert proxy.calls == 2 and len(proxy.refused) == 2 and "429 (max_turns=2" in proxy.refused[1]
    finally:
        await runner.cleanup()
