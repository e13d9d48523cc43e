"""The local (bubblewrap) sandbox under a hostile agent: what the Docker backend holds, it holds.

Every destructive command runs through :func:`inside_only` (refused in the host's pid namespace)
and, as root, as the sandbox's own lent uid, as the backend does for every command.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gymfleet.envs.errors import SandboxDamagedError
from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.local_cgroup import oom_kills, peak_bytes
from gymfleet.envs.sandbox.local import LocalBackend, LocalBackendConfig
from gymfleet.envs.sandbox.local_sandbox import LocalSandbox
from gymfleet.envs.sandbox.local_state import read_records
from tests.conftest import IN_CI
from tests.envs.sandbox.conftest import inside_only

pytestmark = pytest.mark.bwrap

# CI runs as root: there a missing root fails these tests instead of skipping them
needs_root = pytest.mark.skipif(os.geteuid() != 0 and not IN_CI,
                                reason="the agent is apart from the commands' user only as root")


async def live_processes(sb: LocalSandbox) -> int:
    ps = await sb.exec("ps -e -o stat= | grep -vc '^Z'", timeout_s=30)
    return int(ps.stdout.strip())


@needs_root
async def test_kill_everything_from_inside_ends_only_the_commands(sandbox: LocalSandbox) -> None:
    assert (await sandbox.exec("id -un")).stdout == "sandbox\n"  # the lent uid, not root
    await sandbox.exec("sleep 500 &")
    # kills every process of the sandbox's user but itself; the agent, another user, lives on
    result = await sandbox.exec(inside_only("echo before; kill -9 -1; echo after"), timeout_s=20)
    assert result.stdout == "before\nafter\n", result
    await sandbox.exec(inside_only("pkill -9 sleep; pkill -9 python3; pkill -9 bwrap; true"))
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"
    assert "sleep 500" not in (await sandbox.exec("ps -eo args")).stdout


@needs_root
async def test_rm_rf_root_harms_only_the_sandbox(local_backend: LocalBackend, tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel"
    sentinel.write_text("still here")
    async with local_backend.create(SandboxSpec()) as victim, local_backend.create(SandboxSpec()) as bystander:
        await victim.exec("echo data > /app/f")
        await victim.exec(inside_only("rm -rf --no-preserve-root / 2>/dev/null; true"), timeout_s=120)
        assert (await victim.exec("ls /app; echo usable")).stdout == "usable\n"  # own files gone, tools left
        assert (await bystander.exec("ls /usr/bin/ls && echo fine")).stdout.endswith("fine\n")
    assert sentinel.read_text() == "still here" and Path("/usr/bin/ls").exists()


async def test_fork_bomb_leftovers_do_not_slow_or_break_the_next_command(local_backend: LocalBackend) -> None:
    async with local_backend.create(SandboxSpec(pids_limit=64)) as sb:
        await sb.exec(inside_only(":(){ :|:& };:"), timeout_s=10)  # returns at once; the bomb runs on
        await asyncio.sleep(2)
        started = time.monotonic()
        after = await sb.exec("echo next", timeout_s=30)
        assert after.ok and after.stdout == "next\n", after
        assert "process limit" in after.stderr  # the agent says what it killed
        assert time.monotonic() - started < 5  # was 7-15 s a command, failing to fork
        assert await live_processes(sb) < 10
        # in the foreground: the command times out, its leftovers go too
        result = await sb.exec(inside_only("f(){ f | f; }; f"), timeout_s=3)
        assert result.timed_out
        assert (await sb.exec("echo fine", timeout_s=30)).stdout == "fine\n"
        assert await live_processes(sb) < 10


async def test_daemons_under_the_limit_live_on(sandbox: LocalSandbox) -> None:
    await sandbox.exec("sleep 600 & sleep 601 &")
    await sandbox.exec("true")
    assert "sleep 601" in (await sandbox.exec("ps -eo args")).stdout


async def test_a_full_disk_is_the_sandboxs_error(local_backend: LocalBackend) -> None:
    async with local_backend.create(SandboxSpec(disk_mb=64)) as sb:
        for where in ("/app/big", "/tmp/big"):
            result = await sb.exec(f"head -c 200M /dev/zero > {where}", timeout_s=60)
            assert result.exit_code != 0 and "No space left" in result.stderr, result
        usage = await sb.exec("df -m --output=size /app /tmp | tail -2")
        assert [int(n) for n in usage.stdout.split()] == [64, 64]
        assert (await sb.exec("rm /app/big /tmp/big && echo freed")).stdout == "freed\n"
        assert (await sb.exec("stat -c %U /app")).stdout == ("sandbox\n" if os.geteuid() == 0 else "root\n")


@needs_root
async def test_tmpfs_files_count_against_the_sandboxs_memory(local_backend: LocalBackend) -> None:
    assert local_backend.cgroups.available(), "root with cgroup v1 memory (or v2) is expected here"
    async with local_backend.create(SandboxSpec(memory_mb=96, disk_mb=512)) as sb:
        record = next(r for r in read_records(local_backend.state_dir) if r.sandbox_id == sb.sandbox_id)
        cgroup = Path(record.cgroup)
        limit = cgroup / "memory.limit_in_bytes" if (cgroup / "memory.limit_in_bytes").exists() else cgroup / "memory.max"
        assert int(limit.read_text()) == 96 << 20
        # the agent joined it (bubblewrap stays outside), and its commands start inside it
        members = (cgroup / "cgroup.procs").read_text().split()
        assert any("local_agent.py" in Path(f"/proc/{pid}/cmdline").read_text() for pid in members)
        assert str(record.agent_pid) not in members
        assert cgroup.name in (await sb.exec("cat /proc/self/cgroup")).stdout
        # 3 x 40 MiB of files fit the 512 MiB tmpfs but not the 96 MiB of memory: the OOM killer
        # acts inside the sandbox (on the writer, or on the agent: then the sandbox is damaged)
        try:
            result = await sb.exec("for i in 1 2 3; do head -c 40M /dev/zero > /tmp/f$i || exit 1; done; echo wrote",
                                   timeout_s=60)
            assert "wrote" not in result.stdout, result
        except SandboxDamagedError as exc:
            assert "out of memory" in str(exc)
        assert oom_kills(cgroup) >= 1 and peak_bytes(cgroup) <= 96 << 20
        total = (cgroup.parent / ("memory.limit_in_bytes" if limit.name.endswith("bytes") else "memory.max")).read_text()
        assert int(total) == local_backend.cgroups.budget_bytes
    assert not cgroup.exists()  # removed with the sandbox


async def test_python_output_before_a_timeout_is_kept(sandbox: LocalSandbox) -> None:
    result = await sandbox.exec("python3 -c 'print(\"early\"); import time; time.sleep(60)'", timeout_s=3)
    assert result.timed_out and result.stdout == "early\n"


OWNER = """
import asyncio, sys
from gymfleet.envs.errors import SandboxDamagedError
from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.local_cgroup import oom_kills, peak_bytes
from gymfleet.envs.sandbox.local import LocalBackend, LocalBackendConfig

async def main():
    backend = LocalBackend(LocalBackendConfig(state_dir=sys.argv[1], allow_unisolated=False))
    for _ in range(3):
        await backend.create(SandboxSpec(), SandboxLabels(run_id=sys.argv[2])).start()
    print("up", flush=True)
    await asyncio.sleep(1000)

asyncio.run(main())
"""


def test_cli_gc_reports_the_local_sandboxes_it_removed(bwrap_available: bool, tmp_path: Path) -> None:
    from gymfleet.cli import app

    run_id = f"test-gc-cli-{os.getpid()}"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path), run_id], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "up"
    finally:
        owner.kill()
        owner.wait()
    assert len(read_records(tmp_path)) == 3
    os.environ["GYMFLEET_HOME"] = str(tmp_path.parent / f"{tmp_path.name}-home")
    try:
        (tmp_path.parent / f"{tmp_path.name}-home").mkdir()
        os.symlink(tmp_path, tmp_path.parent / f"{tmp_path.name}-home" / "sandboxes")
        result = CliRunner().invoke(app, ["sandbox", "gc", "--run-id", run_id])
    finally:
        del os.environ["GYMFLEET_HOME"]
    assert result.exit_code == 0, result.output
    assert re.search(r"local: removed 3\b", result.output), result.output
    assert read_records(tmp_path) == []


def test_memory_budget_defaults_to_half_the_host(tmp_path: Path) -> None:
    backend = LocalBackend(LocalBackendConfig(state_dir=tmp_path, memory_budget_mb=1024))
    assert backend.cgroups.budget_bytes == 1 << 30
    half = os.sysconf("SC_PHYS_PAGES") // 2 * os.sysconf("SC_PAGE_SIZE")
    assert LocalBackend(LocalBackendConfig(state_dir=tmp_path)).cgroups.budget_bytes == half
