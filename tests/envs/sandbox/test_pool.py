"""The sandbox pool: reuse, reset between users, bounds, concurrency; fake and real backends."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from gymfleet.envs.errors import SandboxClosedError
from gymfleet.envs.sandbox.base import ExecResult, Sandbox, SandboxBackend, SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.local import LocalBackend
from gymfleet.envs.sandbox.local_state import marked_pids
from gymfleet.envs.sandbox.pool import PoolConfig, SandboxPool
from tests.envs.sandbox.fakes import FakeBackend, FakeSandbox

# A checkout (and its venv) under /tmp is bound read-only into each local sandbox's own /tmp, at
# the same path: a reset cannot remove that mount point, and need not.
HOST_BINDS_IN_TMP = "".join(
    f"{top}\n" for top in sorted({Path(p).parts[2] for p in {sys.prefix, sys.base_prefix}
                                  if Path(p).parts[:2] == ("/", "tmp") and len(Path(p).parts) > 2})
)


async def test_fake_backend_implements_the_protocols() -> None:
    backend = FakeBackend()
    assert isinstance(backend, SandboxBackend)
    assert isinstance(backend.create(SandboxSpec()), Sandbox)


async def test_release_resets_and_reuses() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend) as pool:
        async with pool.acquire(SandboxSpec()) as first:
            await first.exec("touch left-behind")
            await first.exec("daemon")
        async with pool.acquire(SandboxSpec()) as second:
            assert second is first
            assert (await second.exec("ls")).stdout == "" and second.processes == 0
        async with pool.acquire(SandboxSpec(network=True)) as other:
            assert other is not first
        assert (pool.created, pool.reused, pool.idle_count()) == (2, 1, 2)
    assert all(sb.closed for sb in backend.made)


async def test_unhealthy_and_expiring_sandboxes_are_discarded() -> None:
    backend = FakeBackend()
    async with SandboxPool(backend) as pool:
        async with pool.acquire(SandboxSpec()) as broken:
            broken.broken = True
        assert broken.closed and pool.idle_count() == 0
        soon = SandboxLabels(expires_at=time.time() + 5)
        async with pool.acquire(SandboxSpec(), soon) as expiring:
            pass
        assert expiring.closed and pool.idle_count() == 0
        pool.config.max_uses = 2
        async with pool.acquire(SandboxSpec()) as once:
            pass
        async with pool.acquire(SandboxSpec()) as twice:
            assert twice is once
        assert once.closed and pool.idle_count() == 0


async def test_concurrent_acquires_are_bounded() -> None:
    backend = FakeBackend()
    spec = SandboxSpec()
    async with SandboxPool(backend, PoolConfig(max_idle_per_key=3)) as pool:
        async def use() -> int:
            async with pool.acquire(spec) as sb:
                await asyncio.sleep(0.01)
                return id(sb)

        assert len(set(await asyncio.gather(*(use() for _ in range(8))))) == 8
        assert pool.idle_count(spec) == 3 and sum(sb.closed for sb in backend.made) == 5
        await asyncio.gather(*(use() for _ in range(3)))
        assert pool.created == 8 and pool.reused == 3
    with pytest.raises(SandboxClosedError):
        async with pool.acquire(spec):
            pass


async def test_prewarm_and_close_releases_everything() -> None:
    backend = FakeBackend()
    pool = SandboxPool(backend, PoolConfig(max_idle_per_key=2))
    await pool.prewarm(SandboxSpec(), 5)
    assert pool.idle_count() == 2 and all(sb.started for sb in backend.made)
    async with pool.acquire(SandboxSpec()) as busy:
        await pool.close()
        await pool.close()
        assert not busy.closed
    assert all(sb.closed for sb in backend.made)


@pytest.mark.bwrap
async def test_pool_with_local_sandboxes(local_backend: LocalBackend) -> None:
    spec = SandboxSpec()
    async with SandboxPool(local_backend, PoolConfig(max_idle_per_key=2)) as pool:
        async with pool.acquire(spec) as first:
            await first.exec("echo x > left.txt; echo y > /tmp/t.txt; sleep 1000 &")
        async with pool.acquire(spec) as second:
            assert second is first
            assert (await second.exec("ls -A; ls -A /tmp")).stdout == HOST_BINDS_IN_TMP
            assert "sleep" not in (await second.exec("ps -eo comm=")).stdout

        async def use(i: int) -> str:
            async with pool.acquire(spec) as sb:
                return (await sb.exec(f"echo {i} > f; cat f; ls | wc -l")).stdout

        outputs = await asyncio.gather(*(use(i) for i in range(4)))
        assert outputs == [f"{i}\n1\n" for i in range(4)]
        assert pool.idle_count(spec) == 2 and pool.created == 4
        warm = [slot.sandbox for slot in pool._idle[spec.pool_key()]]
    assert all(marked_pids(sb.sandbox_id) == [] for sb in warm)


class _WithoutReset:
    """A real sandbox seen through the plain Sandbox protocol (no ``reset``)."""

    def __init__(self, inner: Sandbox) -> None:
        self._inner = inner
        self.spec, self.labels = inner.spec, inner.labels
        self.isolated = inner.isolated
        self.start, self.exec, self.close = inner.start, inner.exec, inner.close
        self.put_file, self.get_file = inner.put_file, inner.get_file


class _PlainBackend:
    name = "plain"

    def __init__(self, inner: SandboxBackend) -> None:
        self._inner = inner

    def available(self) -> bool:
        return self._inner.available()

    def create(self, spec: SandboxSpec, labels: SandboxLabels | None = None) -> _WithoutReset:
        return _WithoutReset(self._inner.create(spec, labels))

    async def gc(self, *, run_id: str | None = None, expired_only: bool = True) -> int:
        return await self._inner.gc(run_id=run_id, expired_only=expired_only)


@pytest.mark.bwrap
async def test_generic_reset_script_on_a_real_sandbox(local_backend: LocalBackend) -> None:
    async with SandboxPool(_PlainBackend(local_backend)) as pool:
        async with pool.acquire(SandboxSpec()) as first:
            await first.exec("touch .hidden visible /tmp/t; mkdir d; sleep 1000 &")
        async with pool.acquire(SandboxSpec()) as second:
            assert second is first
            assert (await second.exec("ls -A; ls -A /tmp")).stdout == HOST_BINDS_IN_TMP
            assert "sleep" not in (await second.exec("ps -eo comm=")).stdout


class _UnisolatedFake:
    """Wraps the in-memory fake as an unisolated sandbox without reset(): it records every
    command instead of running it, so a regression cannot kill the host's processes."""

    def __init__(self, inner: Sandbox) -> None:
        self.inner, self.spec, self.labels, self.isolated = inner, inner.spec, inner.labels, False
        self.commands: list[str] = []

    async def start(self) -> None:
        await self.inner.start()

    async def exec(self, cmd: str, timeout_s: float = 60.0, workdir: str | None = None,
                   env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
        self.commands.append(cmd)
        return await self.inner.exec("true")

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


async def test_an_unisolated_sandbox_is_closed_not_reset() -> None:
    """The generic reset kills every process it can see: on an unisolated sandbox, the host's."""
    backend = FakeBackend()
    made: list[_UnisolatedFake] = []

    class Unisolated(FakeBackend):
        def create(self, spec: SandboxSpec, labels: SandboxLabels | None = None):  # type: ignore[no-untyped-def]
            made.append(_UnisolatedFake(backend.create(spec, labels)))
            return made[-1]

    async with SandboxPool(Unisolated()) as pool:
        for _ in range(2):
            async with pool.acquire(SandboxSpec()) as sandbox:
                await sandbox.exec("true")
    assert len(made) == 2 and pool.reused == 0 and all(s.inner.closed for s in made)
    assert not any("kill" in cmd for s in made for cmd in s.commands)


@pytest.mark.bwrap
async def test_a_pooled_local_sandbox_keeps_nothing_of_its_last_user(local_backend: LocalBackend) -> None:
    """Everything the sandbox user can write (workdir, /tmp, /var/tmp, its HOME /root) is
    emptied, so one rollout cannot leave config (a git alias, a .bashrc) for the next."""
    async with SandboxPool(local_backend) as pool:
        async with pool.acquire(SandboxSpec()) as first:
            await first.exec("git config --global alias.st status; echo x > ~/.bashrc; "
                             "touch /var/tmp/v /tmp/t left")
        async with pool.acquire(SandboxSpec()) as second:
            assert second is first
            left = await second.exec("ls -A ~ /var/tmp; git config --global --list")
            assert ".gitconfig" not in left.stdout and ".bashrc" not in left.stdout
            assert "alias.st" not in left.stdout and "\nv\n" not in left.stdout


@pytest.mark.docker
async def test_a_docker_sandbox_changed_outside_workdir_and_tmp_is_not_reused(terminal_image: str) -> None:
    """Root in a container can write anywhere; a pool reuses it only when the reset left the
    image's filesystem as it was (workdir and /tmp are emptied by the reset itself)."""
    from gymfleet.envs.sandbox.docker import DockerBackend

    spec = SandboxSpec(image=terminal_image)
    async with SandboxPool(DockerBackend()) as pool:
        async with pool.acquire(spec) as first:
            await first.exec("echo x > left.txt; touch /tmp/t; sleep 1000 &")
        async with pool.acquire(spec) as second:
            assert second is first and pool.created == 1  # only workdir and /tmp: reused
            await second.exec("git config --global alias.st status")
        async with pool.acquire(spec) as third:
            assert third is not first and pool.created == 2  # /root/.gitconfig: a new container
            left = await third.exec("git config --global --list; ls -A")
            assert "alias.st" not in left.stdout and "left.txt" not in left.stdout


async def test_a_burst_of_cold_starts_is_bounded() -> None:
    """A thousand rollouts starting at once must not start a thousand sandboxes at once: each
    start would then be slow enough to time out."""
    starting, peak = 0, 0

    class SlowStart(FakeBackend):
        def create(self, spec: SandboxSpec, labels: SandboxLabels | None = None):  # type: ignore[no-untyped-def]
            sandbox = super().create(spec, labels)
            start = sandbox.start

            async def slow_start() -> None:
                nonlocal starting, peak
                starting += 1
                peak = max(peak, starting)
                await asyncio.sleep(0.01)
                await start()
                starting -= 1

            sandbox.start = slow_start  # type: ignore[method-assign]
            return sandbox

    async with SandboxPool(SlowStart(), PoolConfig(max_starting=3, max_idle_per_key=50)) as pool:

        async def use() -> None:
            async with pool.acquire(SandboxSpec()):
                await asyncio.sleep(0.01)

        await asyncio.gather(*(use() for _ in range(30)))
    assert peak == 3 and pool.created == 30


class _ResettingSandbox(FakeSandbox):
    """A fake with its own reset(); records the commands the pool runs in it."""

    def __init__(self, spec: SandboxSpec, labels: SandboxLabels, runs_a_command: bool) -> None:
        super().__init__(spec, labels)
        self.reset_runs_a_command = runs_a_command
        self.commands: list[str] = []

    async def reset(self) -> bool:
        self.files.clear()
        self.processes = 0
        return not self.broken

    async def exec(self, cmd: str, timeout_s: float = 60.0, workdir: str | None = None,
                   env: dict[str, str] | None = None) -> ExecResult:
        self.commands.append(cmd)
        return await super().exec(cmd, timeout_s, workdir, env)


class _ResettingBackend(FakeBackend):
    def __init__(self, runs_a_command: bool) -> None:
        super().__init__()
        self.runs_a_command = runs_a_command

    def create(self, spec: SandboxSpec, labels: SandboxLabels | None = None) -> FakeSandbox:
        sandbox = _ResettingSandbox(spec, labels or SandboxLabels(), self.runs_a_command)
        self.made.append(sandbox)
        return sandbox


@pytest.mark.parametrize("runs_a_command", [True, False])
async def test_health_check_only_when_the_reset_ran_no_command(runs_a_command: bool) -> None:
    """A reset that already ran a command (``reset_runs_a_command``, the local backend's) is
    not followed by ``true``; any other reset is, and a failed reset still discards."""
    async with SandboxPool(_ResettingBackend(runs_a_command)) as pool:
        async with pool.acquire(SandboxSpec()) as first:
            await first.exec("touch left-behind")
        async with pool.acquire(SandboxSpec()) as second:
            assert second is first and (await second.exec("ls")).stdout == ""
            second.broken = True
        assert second.closed and pool.idle_count() == 0
    assert first.commands[:2] == (["touch left-behind", "ls"] if runs_a_command else
                                  ["touch left-behind", "true"])


def test_the_local_sandbox_says_its_reset_runs_a_command() -> None:
    from gymfleet.envs.sandbox.local_sandbox import LocalSandbox

    assert LocalSandbox.reset_runs_a_command is True


async def test_a_return_cancelled_during_its_reset_closes_the_sandbox() -> None:
    """A rollout cancelled (a run stopping) while its sandbox is reset on return: the sandbox is
    closed, not left running (before: a Docker container outlived the run)."""

    class HangingReset(_ResettingSandbox):
        async def reset(self) -> bool:
            await asyncio.sleep(3600)
            return True

    class Backend(FakeBackend):
        def create(self, spec: SandboxSpec, labels: SandboxLabels | None = None) -> FakeSandbox:
            sandbox = HangingReset(spec, labels or SandboxLabels(), True)
            self.made.append(sandbox)
            return sandbox

    backend = Backend()
    async with SandboxPool(backend) as pool:
        async def use() -> None:
            async with pool.acquire(SandboxSpec()):
                pass

        task = asyncio.create_task(use())
        while not backend.made:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # in the reset now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert backend.made[0].closed and pool.idle_count() == 0
