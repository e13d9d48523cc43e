"""Browser pages reach nothing on the host: a task page's beacons, fetches, scripts, images and
web sockets to gymfleet's own replica server (the real ``gymfleet serve`` app, over TCP on
127.0.0.1) never arrive, and a cross-origin script never runs; the admin routes refuse a browser's
requests and any request without the admin token."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
import uvicorn

from gymfleet.envs.browser.env import BrowserEnv
from gymfleet.envs.browser.guard import is_internal_address
from gymfleet.envs.browser.tasks import TaskOutcome, UrlTask
from gymfleet.orchestrator.engines.server import build_app
from gymfleet.orchestrator.engines.vllm import VLLMEngine, VLLMEngineConfig
from tests.envs.browser.secret_server import secret_server
from tests.orchestrator.fake_engine import FakeEngine

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

ADAPTER = "run-v000001"
SECRET = "gymfleet-js-secret"

# On load and on a click, every way a page has to send a request to the replica.
HOSTILE = """<html><head><title>Hostile</title></head><body>
<button onclick="go()">Go</button><p id="out">nothing</p>
<script>
const base = __BASE__, js = __JS__;
function go() {
  for (const host of [base, base.replace('127.0.0.1', 'localhost'), base.replace('127.0.0.1', '[::ffff:127.0.0.1]')]) {
    navigator.sendBeacon(host + '/v1/unload_lora_adapter', JSON.stringify({lora_name: 'ADAPTER'}));
    fetch(host + '/v1/load_lora_adapter', {method: 'POST', mode: 'no-cors',
      body: JSON.stringify({lora_name: 'evil', lora_path: '/tmp/evil'})}).catch(() => {});
    const img = new Image(); img.src = host + '/v1/models?img';
    try { new WebSocket(host.replace('http', 'ws') + '/ws'); } catch (e) {}
  }
  const s = document.createElement('script'); s.src = js; document.head.appendChild(s);
}
go();
</script></body></html>""".replace("ADAPTER", ADAPTER)


class Recorder:
    """ASGI middleware: every HTTP request path the replica server got."""

    def __init__(self, app: object) -> None:
        self.app, self.paths = app, []

    async def __call__(self, scope: dict, receive: object, send: object) -> None:
        if scope["type"] in ("http", "websocket"):
            self.paths.append(scope["path"])
        await self.app(scope, receive, send)  # type: ignore[operator]


@pytest_asyncio.fixture(loop_scope="session")
async def replica() -> AsyncIterator[tuple[FakeEngine, Recorder, str]]:
    engine = FakeEngine("r0")
    engine.adapters.add(ADAPTER)
    app = Recorder(build_app(engine, "base", admin_token="not-a-page-secret"))  # type: ignore[arg-type]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws="none"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield engine, app, f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task


@pytest.fixture(scope="module")
def js_server() -> Iterator[str]:
    """A local service serving a secret as JavaScript."""
    body = f"document.getElementById('out').textContent = '{SECRET}';".encode()
    with secret_server(body, {"Content-Type": "application/javascript"}) as url:
        yield f"{url}/secret.js"


async def never_done(page: object) -> TaskOutcome:
    return TaskOutcome(reward=0.0, done=False, reason="")


async def test_a_page_reaches_nothing_on_the_host(browser_host, replica, js_server: str, tmp_path: Path) -> None:
    engine, recorder, base = replica
    page = tmp_path / "hostile.html"
    page.write_text(HOSTILE.replace("__BASE__", json.dumps(base)).replace("__JS__", json.dumps(js_server)))
    env = BrowserEnv(host=browser_host, tasks=[UrlTask("hostile", page.as_uri(), "Press Go.", never_done)],
                     max_turns=3)
    try:
        obs, _ = await env.reset_async()
        obs, *_ = await env.step_async("click(" + obs.split('] button "Go')[0].rsplit("[", 1)[1] + ")")
        await asyncio.sleep(0.5)  # beacons are sent after the page goes on
        obs, *_ = await env.step_async("noop()")
    finally:
        await env.close_async()
    assert recorder.paths == [], recorder.paths
    assert engine.adapters == {ADAPTER}
    assert SECRET not in obs, obs


async def test_internal_addresses() -> None:
    for address in ("127.0.0.1", "10.1.2.3", "192.168.0.1", "172.16.0.5", "169.254.169.254", "::1",
                    "[::ffff:127.0.0.1]", "0.0.0.0", "fd00::1"):
        assert is_internal_address(address), address
    assert not is_internal_address("93.184.216.34")
    assert not is_internal_address("example.org")


async def test_admin_routes_take_the_token_and_refuse_browsers() -> None:
    engine = FakeEngine("r0")
    app = build_app(engine, "base", admin_token="t0ken")  # type: ignore[arg-type]
    body = {"lora_name": ADAPTER, "lora_path": "/tmp/x"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://replica") as http:
        assert (await http.post("/v1/load_lora_adapter", json=body)).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert (await http.post("/v1/load_lora_adapter", json=body, headers=wrong)).status_code == 401
        page = {"Authorization": "Bearer t0ken", "Origin": "null"}
        assert (await http.post("/v1/unload_lora_adapter", json=body, headers=page)).status_code == 403
    assert engine.adapters == set()
    config = VLLMEngineConfig(base_url="http://replica", model="base", admin_token="t0ken")
    async with VLLMEngine(config, transport=httpx.ASGITransport(app=app)) as client:
        await client.load_adapter(ADAPTER, "/tmp/x")
    assert engine.adapters == {ADAPTER}


GROWER = """<html><head><title>Grow</title></head><body><button onclick="grow()">Grow</button>
<p id="out">small</p><script>function grow() { out.textContent = 'x'.repeat(1 << 20); }</script></body></html>"""


async def test_an_oversize_observation_ends_the_episode_as_the_policys_doing(browser_host, tmp_path: Path) -> None:
    page = tmp_path / "grow.html"
    page.write_text(GROWER)
    done = lambda page: _done(page)  # noqa: E731 - the page claims success once grown
    env = BrowserEnv(host=browser_host, tasks=[UrlTask("grow", page.as_uri(), "Press Grow.", done)],
                     max_turns=5, max_observation_chars=4000)
    try:
        obs, _ = await env.reset_async()
        obs, reward, terminated, truncated, info = await env.step_async(
            "click(" + obs.split('] button "Grow')[0].rsplit("[", 1)[1] + ")")
    finally:
        await env.close_async()
    assert len(obs) <= 4000 and "observation cut" in obs
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["oversize_observation_chars"] > 1 << 20 and not info["success"]


async def _done(page: Any) -> TaskOutcome:
    grown = await page.evaluate("document.getElementById('out').textContent.length > 1000")
    return TaskOutcome(reward=1.0 if grown else 0.0, done=bool(grown), reason="grown")
