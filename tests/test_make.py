"""The two commands of the README do their own set-up: `make run` installs and starts the services
the default run needs (like `make test` does for the tests), then trains."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dry_run(target: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.fail("make is not installed: apt-get install make (scripts/services.sh installs it)")
    out = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def test_make_run_starts_the_services_before_training() -> None:
    lines = _dry_run("run")
    services = next(i for i, line in enumerate(lines) if "scripts/services.sh run" in line)
    train = next(i for i, line in enumerate(lines) if "gymfleet train configs/train-default.yaml" in line)
    assert services < train


def test_make_test_starts_every_service_before_pytest() -> None:
    lines = _dry_run("test")
    services = next(i for i, line in enumerate(lines) if line.strip() == "bash scripts/services.sh")
    pytest_line = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    assert services < pytest_line


def test_services_script_knows_what_the_default_run_needs() -> None:
    text = (ROOT / "scripts" / "services.sh").read_text()
    for package in ("docker.io", "bubblewrap", "chromium"):
        assert package in text
    bad = subprocess.run(["bash", str(ROOT / "scripts" / "services.sh"), "nonsense"], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr
