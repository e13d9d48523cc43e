"""Fixtures of the SWE tests: SWE-bench Lite's test split (``../shared/data`` beside the clone)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[3]
LITE_CANDIDATES = (ROOT.parent / "shared/data/swe-bench-lite-test.json",
                   Path("/work/shared/data/swe-bench-lite-test.json"))


@pytest.fixture(scope="session")
def lite_path() -> Path:
    """SWE-bench Lite's 300 test instances (fails in CI when missing)."""
    found = next((p for p in LITE_CANDIDATES if p.is_file()), None)
    require(found is not None, "SWE-bench Lite test split",
            f"put swe-bench-lite-test.json at {LITE_CANDIDATES[0]}")
    assert found is not None
    return found


@pytest.fixture(scope="session")
def lite_rows(lite_path: Path) -> list[dict[str, Any]]:
    """The rows of :func:`lite_path`."""
    return json.loads(lite_path.read_text())
