"""Fixtures of the sandbox tests: a local backend whose records live in a temp folder."""

from __future__ import annotations

from collections.abc import AsyncIterator
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
