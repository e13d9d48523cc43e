"""What a hostile command inside a local sandbox cannot do: touch the host, exhaust its
processes, reach its network."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
import subprocess
from pathlib import Path

import pytest

from gymfleet.envs.sandbox.base import SandboxSpec
from gymfleet.envs.sandbox.local import LocalBackend
from gymfleet.envs.sandbox.local_agent import NPROC_RESERVE
from gymfleet.envs.sandbox.local_sandbox import LocalSandbox
from gymfleet.envs.sandbox.local_state import marked_pids

pytestmark = pytest.mark.bwrap


async def test_rm_rf_root_spares_the_host_and_other_sandboxes(
    local_backend: LocalBackend, sandbox: LocalSandbox, tmp_path: Path
) -> None:
    canary = tmp_path / "canary.txt"
    canary.write_text("alive")
    async with local_backend.create(SandboxSpec()) as victim:
        await victim.put_file("mine.txt", b"x")
        result = await victim.exec("rm -rf / --no-preserve-root; ls /usr/bin | wc -l", timeout_s=120)
        assert not result.timed_out
        assert victim.host_dir is not None and not (victim.host_dir / "work" / "mine.txt").exists()
    assert canary.read_text() == "alive"
    assert Path("/usr/bin/true").exists() and Path("/etc/passwd").exists()
    assert subprocess.run(["true"]).returncode == 0
    assert (await sandbox.exec("cat /etc/hostname >/dev/null && echo ok")).stdout == "ok\n"


async def test_fork_bomb_is_contained(local_backend: LocalBackend, sandbox: LocalSandbox) -> None:
    spec = SandboxSpec(pids_limit=32)
    async with local_backend.create(spec) as bomb:
        await bomb.exec(":(){ :|:& };:", timeout_s=3)
        counts = []
        for _ in range(10):
            await asyncio.sleep(0.1)
            counts.append(len(marked_pids(bomb.sandbox_id)))
        # bubblewrap outside, bubblewrap inside and the agent are not bound by the limit
        assert max(counts) <= spec.pids_limit + NPROC_RESERVE + 3
        assert (await bomb.exec("echo agent answers", timeout_s=30)).stdout == "agent answers\n"
        assert (await sandbox.exec("echo neighbour works")).stdout == "neighbour works\n"
        assert subprocess.run(["true"]).returncode == 0
        assert await bomb.reset()
        assert (await bomb.exec("ps -eo pid= | wc -l")).stdout.strip() in {"3", "4", "5"}
    assert marked_pids(bomb.sandbox_id) == []


@pytest.fixture
def host_port() -> Iterator[int]:
    """A port on the host's 127.0.0.1 that accepts connections."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


CONNECT = "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)\""


async def test_no_network_unless_asked(local_backend: LocalBackend, host_port: int) -> None:
    async with local_backend.create(SandboxSpec()) as offline:
        result = await offline.exec(CONNECT.format(port=host_port), timeout_s=30)
        assert result.exit_code != 0 and "Error" in result.stderr
    async with local_backend.create(SandboxSpec(network=True)) as online:
        result = await online.exec(CONNECT.format(port=host_port), timeout_s=30)
        assert result.ok, result.stderr


async def test_memory_limit_stops_a_hog(local_backend: LocalBackend) -> None:
    async with local_backend.create(SandboxSpec(memory_mb=200)) as sb:
        hog = await sb.exec("python3 -c 'x = bytearray(400 * 1024 * 1024)'", timeout_s=30)
        assert hog.exit_code != 0 and "MemoryError" in hog.stderr
        assert (await sb.exec("python3 -c 'x = bytearray(50 * 1024 * 1024)'")).ok
