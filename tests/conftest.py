"""Shared test fixtures. Services (Docker, PostgreSQL, Chromium, bubblewrap) are required in
CI (``CI=true``): a missing one fails the test there instead of skipping it."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require(available: bool, what: str, fix: str) -> None:
    """Skips locally, fails in CI, when a service a test needs is missing."""
    if available:
        return
    message = f"{what} is not available: {fix}"
    if IN_CI:
        pytest.fail(f"CI must provide it. {message}")
    pytest.skip(message)


def _docker_up() -> bool:
    try:
        import docker

        docker.from_env(timeout=5).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def docker_available() -> bool:
    """True when a Docker daemon answers; fails in CI when it does not."""
    up = _docker_up()
    require(up, "Docker daemon", "run `make services` (starts dockerd) or set DOCKER_HOST")
    return up


@pytest.fixture(scope="session")
def pg_url() -> str:
    """URL of the test PostgreSQL database (``GYMFLEET_TEST_PG_URL``, set by scripts/services.sh)."""
    url = os.environ.get("GYMFLEET_TEST_PG_URL", "")
    require(bool(url), "PostgreSQL", "run `make services` and source scripts/services.env")
    return url


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Path of Debian's Chromium."""
    path = os.environ.get("GYMFLEET_CHROMIUM") or shutil.which("chromium") or ""
    require(bool(path) and os.path.exists(path), "Chromium", "apt-get install chromium (make services)")
    return path


@pytest.fixture(scope="session")
def bwrap_available() -> bool:
    """True when bubblewrap can make a sandbox here."""
    path = shutil.which("bwrap")
    ok = bool(path) and subprocess.run(
        [path, "--ro-bind", "/", "/", "true"], capture_output=True
    ).returncode == 0
    require(ok, "bubblewrap", "apt-get install bubblewrap (make services)")
    return ok


@pytest.fixture(scope="session")
def terminal_image(docker_available: bool) -> str:
    """Tag of the terminal task image (images/terminal), built once per test session if missing."""
    from gymfleet.envs.images import ensure_image

    return ensure_image("terminal")
