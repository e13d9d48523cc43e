"""The Docker sandbox under a hostile agent and a careless operator.

Damage done from inside (``kill -9 -1``, ``pkill sleep``, ``rm -rf /``, a full disk) is the
command's own doing: the sandbox stays up, or :class:`SandboxDamagedError` says the agent broke
it. Damage from outside (``docker rm -f``, ``docker kill``/``restart``, the reaper, the daemon
going away) is a :class:`SandboxError` naming the cause, and the command is never run twice.
Every test touches only containers of its own run id.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from gymfleet.core.errors import SandboxError
from gymfleet.envs.errors import (
    SandboxDamagedError,
    SandboxLostError,
    SandboxUnavailableError,
)
from gymfleet.envs.sandbox.base import LABEL_HOST, LABEL_OWNER_PID, LABEL_OWNER_START, SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.docker import DockerBackend, DockerBackendConfig, DockerSandbox
from gymfleet.envs.sandbox.docker_gc import is_stale
from gymfleet.envs.sandbox.procs import process_start_ticks
from tests.envs.sandbox.conftest import inside_only

pytestmark = pytest.mark.docker

RUN_ID = f"test-hostile-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def backend(docker_available: bool) -> Iterator[DockerBackend]:
    backend = DockerBackend()
    yield backend
    backend._gc_sync(RUN_ID, expired_only=False)


@pytest.fixture
def spec(terminal_image: str) -> SandboxSpec:
    return SandboxSpec(image=terminal_image, memory_mb=256, pids_limit=128, disk_mb=64)


@pytest.fixture
async def sandbox(backend: DockerBackend, spec: SandboxSpec) -> AsyncIterator[DockerSandbox]:
    async with backend.create(spec, SandboxLabels(run_id=RUN_ID)) as sb:
        yield sb


def started_at(backend: DockerBackend, sb: DockerSandbox) -> str:
    return backend.client().api.inspect_container(sb.container_id)["State"]["StartedAt"]


# --- from inside: the command's own doing --------------------------------------------------


async def test_kill_everything_from_inside_ends_only_the_command(backend: DockerBackend, sandbox: DockerSandbox) -> None:
    before = started_at(backend, sandbox)
    await sandbox.exec("sleep 500 &")
    result = await sandbox.exec(inside_only("echo before; kill -9 -1; echo after"), timeout_s=20)
    assert result.exit_code == 137 and "killed the process running it" in result.stderr, result
    assert result.stdout.startswith("before\n")
    assert (await sandbox.exec(inside_only("kill -9 1; kill -TERM 1; kill -STOP 1; echo tried"))).stdout == "tried\n"
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"
    assert "sleep 500" not in (await sandbox.exec("ps -eo args")).stdout
    assert started_at(backend, sandbox) == before  # never restarted behind the caller's back


async def test_pkill_sleep_cannot_stop_the_sandbox(backend: DockerBackend, sandbox: DockerSandbox) -> None:
    before = started_at(backend, sandbox)
    await sandbox.exec(inside_only("pkill -9 sleep; pkill -9 bash; killall5 -9 2>/dev/null; true"))
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"
    assert started_at(backend, sandbox) == before


async def test_rm_rf_root_is_the_policys_damage(sandbox: DockerSandbox) -> None:
    await sandbox.exec(inside_only("rm -rf --no-preserve-root / 2>/dev/null; true"), timeout_s=60)
    with pytest.raises(SandboxDamagedError, match="can no longer start a command"):
        await sandbox.exec("ls /", timeout_s=10)
    assert not issubclass(SandboxDamagedError, SandboxError)  # never classed infrastructure


async def test_a_full_disk_is_the_sandboxs_error(sandbox: DockerSandbox) -> None:
    # what the container wrote to the host's disk: its writable layer (its /tmp and workdir are
    # tmpfs volumes or a quota'd layer). Not the host's free space, which every neighbour moves.
    api = docker.from_env().api

    def layer_bytes() -> int:
        (row,) = api.containers(all=True, filters={"id": sandbox.container_id}, size=True)
        return int(row.get("SizeRw") or 0)

    layer_before = layer_bytes()
    for where in ("/app/big", "/tmp/big"):
        result = await sandbox.exec(f"head -c 200M /dev/zero > {where}", timeout_s=60)
        assert result.exit_code != 0 and "No space left" in result.stderr, result
    usage = await sandbox.exec("df -m --output=size /app /tmp | tail -2")
    assert [int(n) for n in usage.stdout.split()] == [64, 64]
    with pytest.raises(SandboxDamagedError, match="full"):
        await sandbox.put_file("/tmp/more.bin", b"x" * (8 << 20))
    lost_mb = (layer_bytes() - layer_before) / 2**20
    assert lost_mb < 150, f"the host lost {lost_mb:.0f} MiB of disk"  # 2 x 200 MiB were asked
    assert (await sandbox.exec("rm /app/big /tmp/big && echo freed")).stdout == "freed\n"


@pytest.mark.parametrize("then", ["exec", "stop_processes"])
async def test_tmpfs_filled_until_oom_in_the_background_is_the_policys_damage(
    backend: DockerBackend, terminal_image: str, then: str
) -> None:
    """Files in tmpfs count against the memory limit: a background fill past it has the OOM
    killer take every process, PID 1 included; the next command, or the grader's stop, is damage
    (Docker's file copies still work on the stopped container's layer)."""
    spec = SandboxSpec(image=terminal_image, memory_mb=96, disk_mb=512)
    async with backend.create(spec, SandboxLabels(run_id=RUN_ID)) as sb:
        await sb.exec("nohup sh -c 'head -c 400M /dev/zero > /tmp/big' >/dev/null 2>&1 &")
        container = backend.client().containers.get(sb.container_id)
        for _ in range(300):
            container.reload()
            if container.status != "running":
                break
            await asyncio.sleep(0.1)
        assert container.status != "running", "the fill never brought the sandbox down"
        ask = {"exec": lambda: sb.exec("echo hi", timeout_s=10), "stop_processes": sb.stop_processes}
        with pytest.raises(SandboxDamagedError, match="out of memory"):
            await ask[then]()


async def test_python_output_before_a_timeout_is_kept(sandbox: DockerSandbox) -> None:
    result = await sandbox.exec("python3 -c 'print(\"early\"); import time; time.sleep(60)'", timeout_s=3)
    assert result.timed_out and result.stdout == "early\n"


# --- from outside: infrastructure, never a re-run ------------------------------------------


async def _mid_command(sb: DockerSandbox, action) -> BaseException:
    """Runs a counting command, does ``action`` while it runs, returns what exec raised."""
    task = asyncio.create_task(sb.exec("echo x >> /root/count; sleep 30; echo done", timeout_s=60))
    for _ in range(100):
        await asyncio.sleep(0.1)
        probe = await asyncio.to_thread(
            sb._backend.client().api.exec_create, sb.container_id, ["bash", "-c", "test -s /root/count && echo yes"])
        if await asyncio.to_thread(sb._backend.client().api.exec_start, probe["Id"]) == b"yes\n":
            break
    await asyncio.to_thread(action)
    with pytest.raises(SandboxError) as caught:
        await task
    return caught.value


@pytest.mark.parametrize("how", ["restart", "kill"])
async def test_container_stopped_from_outside_is_lost_never_rerun(
    backend: DockerBackend, sandbox: DockerSandbox, how: str
) -> None:
    container = backend.client().containers.get(sandbox.container_id)
    action = (lambda: container.restart(timeout=0)) if how == "restart" else container.kill
    error = await _mid_command(sandbox, action)
    assert isinstance(error, SandboxLostError), error
    # a restart may be seen half way (stopped) or done (restarted): from outside either way
    assert "from outside" in str(error) and "not run again" in str(error)
    if how == "kill":
        container.start()
    count = await sandbox.exec("cat /root/count")  # usable again once running
    assert count.stdout == "x\n", count  # the command ran once


@pytest.mark.parametrize("who", ["operator", "reaper"])
async def test_container_removed_mid_command_is_a_sandbox_error(
    backend: DockerBackend, spec: SandboxSpec, who: str
) -> None:
    run_id = f"{RUN_ID}-{who}"
    async with backend.create(spec, SandboxLabels(run_id=run_id)) as sb:
        if who == "operator":
            action = lambda: backend.client().containers.get(sb.container_id).remove(force=True)  # noqa: E731
        else:
            action = lambda: DockerBackend()._gc_sync(run_id, expired_only=False)  # noqa: E731
        error = await _mid_command(sb, action)
        # the reaper's removal may still be under way when the loss is examined
        assert isinstance(error, SandboxLostError) and ("removed" in str(error) or "stopped" in str(error)), error
        for call in (sb.exec("true"), sb.put_file("f", b"x"), sb.get_file("f")):
            with pytest.raises(SandboxLostError):
                await call
        assert not await sb.reset()


class _SocketProxy:
    """A unix socket forwarding to the Docker daemon's; ``stop()`` is the daemon going away."""

    def __init__(self, path: Path, target: str = "/var/run/docker.sock") -> None:
        self.path, self.target = path, target
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(64)
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.target)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass

    def stop(self) -> None:
        self.server.close()
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


async def test_daemon_going_away_mid_command_is_unavailable(spec: SandboxSpec, tmp_path: Path) -> None:
    proxy = _SocketProxy(tmp_path / "docker.sock")
    backend = DockerBackend(DockerBackendConfig(base_url=f"unix://{tmp_path / 'docker.sock'}", api_timeout_s=10))
    sb = backend.create(spec, SandboxLabels(run_id=RUN_ID))
    await sb.start()
    try:
        task = asyncio.create_task(sb.exec("sleep 30", timeout_s=60))
        await asyncio.sleep(1.5)
        proxy.stop()
        with pytest.raises(SandboxUnavailableError, match="daemon"):
            await task
    finally:
        with contextlib.suppress(SandboxUnavailableError):  # the module's gc removes it
            await sb.close()
    assert not isinstance(task.exception(), docker.errors.DockerException)


def test_reaper_checks_the_owners_start_time() -> None:
    me = {LABEL_HOST: "h1", LABEL_OWNER_PID: str(os.getpid())}
    assert not is_stale({**me, LABEL_OWNER_START: str(process_start_ticks(os.getpid()))}, host="h1")
    # the same pid, started at another time: a reused pid, the owner is dead
    assert is_stale({**me, LABEL_OWNER_START: str(process_start_ticks(os.getpid()) + 1)}, host="h1")
    assert not is_stale(me, host="h1")  # containers from before the label: the pid alone decides


async def test_labels_carry_the_owner_start_time(backend: DockerBackend, sandbox: DockerSandbox) -> None:
    labels = backend.client().api.inspect_container(sandbox.container_id)["Config"]["Labels"]
    assert labels[LABEL_OWNER_START] == str(process_start_ticks(os.getpid()))
