"""The replica's two listeners (`engines/listeners.py`): inference on TCP with no admin route, load
and unload on a 0600 unix socket that still takes the token; real uvicorn servers, real sockets."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from gymfleet.orchestrator.engines.errors import ReplicaLaunchError
from gymfleet.orchestrator.engines.listeners import bind_admin_socket, bind_inference_socket, serve_listeners
from gymfleet.orchestrator.engines.server import build_admin_app, build_app
from gymfleet.orchestrator.engines.vllm import VLLMEngine, VLLMEngineConfig
from tests.orchestrator.fake_engine import FakeEngine

TOKEN = "listener-token"
LOAD = {"lora_name": "run-v000001", "lora_path": "/tmp/x"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest_asyncio.fixture
async def replica(tmp_path: Path) -> AsyncIterator[tuple[FakeEngine, str, Path]]:
    """A FakeEngine behind both listeners, as `gymfleet serve` runs them."""
    engine, port, path = FakeEngine("r0"), _free_port(), tmp_path / "run" / "admin.sock"
    tcp, sock = bind_inference_socket("127.0.0.1", port), bind_admin_socket(path)
    task = asyncio.create_task(serve_listeners(build_app(engine, "base", admin=False),  # type: ignore[arg-type]
                                               build_admin_app(engine, admin_token=TOKEN), tcp, sock))  # type: ignore[arg-type]
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as http:
        for _ in range(1500):  # up to ~30 s on a loaded machine
            try:
                if (await http.get(f"{url}/health")).status_code == 200:
                    break
            except httpx.HTTPError:
                await asyncio.sleep(0.02)
    yield engine, url, path
    os.kill(os.getpid(), 15)  # SIGTERM: the listeners' own handler stops both servers
    await asyncio.wait_for(task, timeout=10)
    assert not path.exists()  # the socket file goes with the replica


async def test_admin_routes_only_on_the_socket(replica: tuple[FakeEngine, str, Path]) -> None:
    engine, url, path = replica
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url) as tcp:
        for route in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
            assert (await tcp.post(route, json=LOAD, headers=bearer)).status_code == 404
        assert (await tcp.get("/v1/models")).status_code == 200
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(path)), base_url="http://a") as uds:
        assert (await uds.post("/v1/load_lora_adapter", json=LOAD)).status_code == 401
        page = {**bearer, "Origin": "null"}
        assert (await uds.post("/v1/load_lora_adapter", json=LOAD, headers=page)).status_code == 403
    assert engine.adapters == set()
    config = VLLMEngineConfig(base_url=url, model="base", admin_token=TOKEN, admin_socket=str(path))
    async with VLLMEngine(config) as client:
        await client.load_adapter("run-v000001", "/tmp/x")
        assert engine.adapters == {"run-v000001"}
        await client.unload_adapter("run-v000001")
    assert engine.adapters == set()


def test_a_stale_socket_is_replaced_and_a_live_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "admin.sock"
    live = bind_admin_socket(path)
    with pytest.raises(ReplicaLaunchError, match="in use by another replica"):
        bind_admin_socket(path)
    live.close()  # the file stays, as after a SIGKILL: no one listens on it
    assert path.exists()
    bind_admin_socket(path).close()


def test_refusals_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ReplicaLaunchError, match="is not a socket"):
        bind_admin_socket(tmp_path / "file")
    with pytest.raises(ReplicaLaunchError, match="longer than 107 bytes"):
        bind_admin_socket(tmp_path / ("x" * 120))
    with pytest.raises(ValueError, match="admin_socket is a gymfleet serve replica's"):
        VLLMEngineConfig(launch=True, admin_socket="/tmp/a.sock")


def test_serve_refuses_an_admin_socket_it_cannot_have_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gymfleet.cli import app

    (tmp_path / "taken").write_text("a file, not a socket")
    result = CliRunner().invoke(app, ["serve", "--admin-token-file", str(tmp_path / "token"),
                                      "--admin-socket", str(tmp_path / "taken")])
    assert result.exit_code == 2 and "is not a socket" in result.output, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    with socket.create_server(("127.0.0.1", 0)) as taken:  # a port in use: uvicorn's SystemExit traceback before
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--port", str(port), "--admin-token-file", str(tmp_path / "token"),
                                          "--admin-socket", str(tmp_path / "a.sock")])
    assert result.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "a.sock").exists()
