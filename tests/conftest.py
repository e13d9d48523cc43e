"""Shared test fixtures. Services (Docker, PostgreSQL, Chromium, bubblewrap) are required in
CI (``CI=true``): a missing one fails the test there instead of skipping it."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

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


def psql_command(url: str) -> tuple[list[str], dict[str, str]]:
    """The ``psql`` command line (and its environment) that connects to the store URL ``url``."""
    parsed = make_url(url)
    command = ["psql", "-q", "-v", "ON_ERROR_STOP=1", "-h", parsed.host or "127.0.0.1", "-p", str(parsed.port or 5432),
               "-U", parsed.username or "", parsed.database or ""]
    return command, {**os.environ, "PGPASSWORD": parsed.password or ""}


@pytest.fixture
def pg_database(pg_url: str) -> Iterator[str]:
    """A PostgreSQL database of this test's own (dropped afterwards), as a store URL."""
    psql, env = psql_command(pg_url)
    name = f"gymfleet_cli_{uuid.uuid4().hex[:10]}"
    subprocess.run([*psql, "-c", f"CREATE DATABASE {name}"], check=True, env=env, capture_output=True)
    yield make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    subprocess.run([*psql, "-c", f"DROP DATABASE {name} WITH (FORCE)"], env=env, capture_output=True)


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


# ---- the embedded model: ONE load per test session, shared by every folder ----


@pytest.fixture(scope="session")
def smollm_tokenizer() -> Any:
    """The embedded model's tokenizer (loaded once)."""
    return _load("tokenizer")


@pytest.fixture(scope="session")
def smollm_model() -> Any:
    """The embedded SmolLM2-135M model (loaded once; tests must not modify it: deepcopy first)."""
    return _load("model")


@pytest.fixture(scope="session")
def lora_dirs(smollm_model: Any, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two different, non-trivial LoRA adapters of the embedded model, saved as peft folders."""
    import torch
    from peft import LoraConfig, get_peft_model

    paths = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        config = LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        peft_model = get_peft_model(copy.deepcopy(smollm_model), config)
        path = tmp_path_factory.mktemp(f"lora{seed}")
        peft_model.save_pretrained(path)
        paths.append(path)
    return paths


def _load(what: str) -> Any:
    from gymfleet.core.models import ModelSpec, load_causal_lm, load_tokenizer

    return (load_causal_lm if what == "model" else load_tokenizer)(ModelSpec())
