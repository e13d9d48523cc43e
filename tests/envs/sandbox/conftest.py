"""Fixtures of the sandbox tests: a local backend whose records live in a temp folder."""

from __future__ import annotations

from collections.abc import AsyncIterator
import os
from pathlib import Path

import pytest

from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec
from gymfleet.envs.sandbox.local import LocalBackend, LocalBackendConfig
from gymfleet.envs.sandbox.local_sandbox import LocalSandbox


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sandbox records of these tests, apart from the user's own."""
    return tmp_path_factory.mktemp("sandbox-state")


@pytest.fixture(scope="session")
def local_backend(bwrap_available: bool, state_dir: Path) -> LocalBackend:
    """The bubblewrap backend (fails in CI, skips elsewhere, when bubblewrap is missing)."""
    backend = LocalBackend(LocalBackendConfig(state_dir=state_dir, allow_unisolated=False))
    assert backend.bwrap_works()
    return backend


@pytest.fixture
async def sandbox(local_backend: LocalBackend) -> AsyncIterator[LocalSandbox]:
    """A started bubblewrap sandbox with the default spec, closed after the test."""
    async with local_backend.create(SandboxSpec(), SandboxLabels(run_id="test")) as sb:
        yield sb


HOST_PID_NS = os.readlink("/proc/self/ns/pid")


def inside_only(cmd: str) -> str:
    """``cmd`` preceded by a check that refuses to run it in the host's pid namespace: every
    destructive command of these tests (``kill -9 -1``, ``rm -rf /``) must only ever reach a
    sandbox, whatever goes wrong."""
    return (f'[ "$(readlink /proc/self/ns/pid)" != "{HOST_PID_NS}" ] || '
            f'{{ echo "refused: not inside a sandbox" >&2; exit 99; }}; {cmd}')
