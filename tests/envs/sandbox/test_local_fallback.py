"""Without bubblewrap the local backend runs unisolated, only when allowed, and says so."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from gymfleet.envs.errors import SandboxFileError, SandboxUnavailableError
from gymfleet.envs.sandbox.base import SandboxSpec
from gymfleet.envs.sandbox.local import LocalBackend, LocalBackendConfig
from gymfleet.envs.sandbox.local_state import marked_pids


def _backend(tmp_path: Path, allow: bool) -> LocalBackend:
    return LocalBackend(LocalBackendConfig(
        state_dir=tmp_path / "state", bwrap="/nonexistent/bwrap", allow_unisolated=allow))


async def test_fallback_runs_unisolated_in_a_temp_folder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = _backend(tmp_path, allow=True)
    assert backend.available() and not backend.bwrap_works()
    with caplog.at_level(logging.WARNING):
        async with backend.create(SandboxSpec(env={"X": "1"})) as sb:
            assert not sb.isolated
            assert "UNISOLATED" in caplog.text
            work = str(sb.host_dir / "work")
            result = await sb.exec('pwd; echo "$GYMFLEET_WORKDIR $X"')
            assert result.stdout.split() == [os.path.realpath(work), work, "1"]
            await sb.put_file("a/b.txt", b"data")
            assert await sb.get_file("/app/a/b.txt") == b"data"
            for bad in ("/etc/passwd", "../escape.txt"):
                with pytest.raises(SandboxFileError, match="outside the workdir"):
                    await sb.get_file(bad)
            await sb.exec("ln -s /etc link")
            with pytest.raises(SandboxFileError, match="outside the workdir"):
                await sb.get_file("link/passwd")
            timed = await sb.exec("sleep 100 & sleep 100", timeout_s=1)
            assert timed.timed_out and marked_pids(sb.sandbox_id) == [sb._proc.pid]
    assert marked_pids(sb.sandbox_id) == [] and not Path(work).exists()


async def test_fallback_refused_unless_allowed(tmp_path: Path) -> None:
    backend = _backend(tmp_path, allow=False)
    assert not backend.available()
    with pytest.raises(SandboxUnavailableError, match="GYMFLEET_ALLOW_UNISOLATED"):
        async with backend.create(SandboxSpec()):
            pass
