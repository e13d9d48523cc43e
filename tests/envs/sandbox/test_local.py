"""The local (bubblewrap) backend on real processes: commands, files, limits, isolation."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from gymfleet.envs.errors import SandboxClosedError, SandboxFileError, SandboxStartError
from gymfleet.envs.sandbox import Sandbox
from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.local import LocalBackend
from gymfleet.envs.sandbox.local_sandbox import LocalSandbox
from gymfleet.envs.sandbox.local_state import marked_pids

pytestmark = pytest.mark.bwrap


async def test_echo_exit_code_and_streams(sandbox: LocalSandbox) -> None:
    assert isinstance(sandbox, Sandbox) and sandbox.isolated
    result = await sandbox.exec("echo hi; echo oops >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "hi\n", "oops\n")
    assert not result.ok and not result.timed_out and not result.truncated
    assert (await sandbox.exec("true")).ok


async def test_cwd_and_env(local_backend: LocalBackend) -> None:
    spec = SandboxSpec(workdir="/app", env={"A": "spec", "B": "spec"})
    async with local_backend.create(spec) as sb:
        assert (await sb.exec("pwd")).stdout == "/app\n"
        await sb.exec("mkdir -p sub/dir")
        assert (await sb.exec("pwd", workdir="sub/dir")).stdout == "/app/sub/dir\n"
        assert (await sb.exec("pwd", workdir="/tmp")).stdout == "/tmp\n"
        result = await sb.exec('echo "$A $B $HOME"', env={"B": "exec"})
        assert result.stdout == "spec exec /root\n"
        missing = await sb.exec("pwd", workdir="/nowhere")
        assert missing.exit_code == 126 and "nowhere" in missing.stderr


async def test_timeout_kills_the_whole_tree(sandbox: LocalSandbox) -> None:
    result = await sandbox.exec("sleep 100 & sleep 100", timeout_s=1)
    assert result.timed_out and result.exit_code == -9 and result.duration_s < 10
    left = await sandbox.exec("ps -eo comm=")
    assert "sleep" not in left.stdout
    assert (await sandbox.exec("echo still here")).stdout == "still here\n"


async def test_daemon_does_not_block_and_survives(sandbox: LocalSandbox) -> None:
    started = await sandbox.exec(
        "python3 -m http.server 8765 --bind 127.0.0.1 & sleep 1000 & echo started", timeout_s=20)
    assert started.ok and started.stdout == "started\n" and started.duration_s < 10
    probe = (
        "import time, urllib.request\n"
        "for _ in range(100):\n"
        "    try:\n"
        "        print(urllib.request.urlopen('http://127.0.0.1:8765/').status); break\n"
        "    except OSError: time.sleep(0.1)\n"
    )
    await sandbox.put_file("probe.py", probe.encode())
    assert (await sandbox.exec("python3 probe.py", timeout_s=30)).stdout == "200\n"
    assert "sleep" in (await sandbox.exec("ps -eo comm=")).stdout


async def test_large_output_keeps_head_and_tail(sandbox: LocalSandbox) -> None:
    cmd = "printf HEAD; head -c 10000000 /dev/zero | tr '\\0' x; printf TAIL"
    result = await sandbox.exec(cmd, timeout_s=60)
    assert result.ok and result.stdout_bytes == 10_000_008 and result.truncated
    assert result.stdout.startswith("HEADxxx") and result.stdout.endswith("xxxTAIL")
    assert "10000008 bytes" in result.stdout
    assert len(result.stdout) < sandbox.spec.max_output_bytes + 200


async def test_binary_output_is_decoded_with_replacement(sandbox: LocalSandbox) -> None:
    result = await sandbox.exec(r"printf 'a\xff\xfe\x00b'")
    assert result.ok and result.stdout_bytes == 5
    assert result.stdout == "a\ufffd\ufffd\x00b"


async def test_put_get_roundtrip_and_errors(sandbox: LocalSandbox) -> None:
    data = bytes(range(256)) * 1000
    await sandbox.put_file("deep/dir/blob.bin", data)
    await sandbox.put_file("/tmp/run.sh", b"#!/bin/sh\necho ran\n", mode=0o755)
    assert await sandbox.get_file("deep/dir/blob.bin") == data
    assert await sandbox.get_file("/app/deep/dir/blob.bin") == data
    assert (await sandbox.exec("/tmp/run.sh")).stdout == "ran\n"
    assert (await sandbox.exec("wc -c < deep/dir/blob.bin")).stdout.strip() == str(len(data))
    with pytest.raises(SandboxFileError, match="missing.txt"):
        await sandbox.get_file("missing.txt")
    with pytest.raises(SandboxFileError):
        await sandbox.get_file("deep")
    with pytest.raises(SandboxFileError):
        await sandbox.put_file("/usr/bin/evil", b"x")


async def test_close_is_idempotent_and_leaves_nothing(local_backend: LocalBackend) -> None:
    sb = local_backend.create(SandboxSpec(), SandboxLabels(run_id="test-close"))
    await sb.start()
    await sb.exec("sleep 1000 &")
    host_dir = sb.host_dir
    assert host_dir is not None and host_dir.exists() and marked_pids(sb.sandbox_id)
    await sb.close()
    await sb.close()
    assert not host_dir.exists()
    assert not (local_backend.state_dir / f"{sb.sandbox_id}.json").exists()
    assert marked_pids(sb.sandbox_id) == []
    with pytest.raises(SandboxClosedError):
        await sb.exec("true")


async def test_concurrent_execs_in_one_sandbox(sandbox: LocalSandbox) -> None:
    results = await asyncio.gather(*(sandbox.exec(f"sleep 1; echo {i}") for i in range(3)))
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]
    assert max(r.duration_s for r in results) < 2.9  # one after another would take 3 s


def test_usable_across_event_loops(local_backend: LocalBackend) -> None:
    sb = local_backend.create(SandboxSpec())
    asyncio.run(sb.start())
    try:
        assert asyncio.run(sb.exec("echo one")).stdout == "one\n"
        assert asyncio.run(sb.exec("echo two")).stdout == "two\n"
    finally:
        asyncio.run(sb.close())
    assert os.path.exists("/usr/bin/true")


async def test_user_home_tmp_and_host_python(local_backend: LocalBackend) -> None:
    async with local_backend.create(SandboxSpec()) as a, local_backend.create(SandboxSpec()) as b:
        script = ("id -u; whoami; touch /tmp/t ~/h && echo writable; "
                  "python3 -c 'import sys, pytest; print(sys.prefix)'")
        first, second = await a.exec(script), await b.exec(script)
        assert first.ok, first.stderr
        uid, name, writable, prefix = first.stdout.split("\n")[:4]
        assert writable == "writable" and prefix == sys.prefix
        if os.geteuid() == 0:  # each sandbox runs as a uid of its own
            assert name == "sandbox" and uid != second.stdout.split("\n")[0]


async def test_open_sandbox_by_name(bwrap_available: bool) -> None:
    from gymfleet.envs.sandbox import get_backend, open_sandbox

    assert isinstance(get_backend("local"), LocalBackend)
    async with open_sandbox(SandboxSpec(), backend="local") as sb:
        assert (await sb.exec("echo via factory")).stdout == "via factory\n"


async def test_commands_cannot_kill_the_agent_or_touch_its_files(sandbox: LocalSandbox) -> None:
    if os.geteuid() != 0:
        pytest.skip("the agent runs apart from the commands' user only when gymfleet runs as root")
    hostile = await sandbox.exec("kill -9 -1; pkill -9 python3; echo x > /.gymfleet/evil")
    assert hostile.exit_code != 0
    assert (await sandbox.exec("echo survived")).stdout == "survived\n"


@pytest.mark.parametrize("workdir", ["relative", "/", "/usr/lib/nope"])
async def test_bad_workdir_fails_to_start_with_the_reason(
    local_backend: LocalBackend, workdir: str
) -> None:
    sb = local_backend.create(SandboxSpec(workdir=workdir))
    with pytest.raises(SandboxStartError, match="workdir|nope"):
        await sb.start()
    assert sb.host_dir is None or not sb.host_dir.exists()


async def test_endless_output_until_timeout_stays_small_on_disk(sandbox: LocalSandbox) -> None:
    result = await sandbox.exec("yes", timeout_s=3)
    assert result.timed_out and result.stdout_bytes > 1_000_000
    assert result.stdout.startswith("y\ny\n") and result.stdout.endswith("y\ny\n")


async def test_cancelled_exec_kills_its_command(sandbox: LocalSandbox) -> None:
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1):
            await sandbox.exec("sleep 100", timeout_s=60)
    for _ in range(50):
        if "sleep" not in (await sandbox.exec("ps -eo comm=")).stdout:
            break
        await asyncio.sleep(0.1)
    assert "sleep" not in (await sandbox.exec("ps -eo comm=")).stdout
