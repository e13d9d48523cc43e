"""The engine's embedded model loads from the de-quantised cache, not the GGUF every start."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.core.models import ModelSpec, gymfleet_home, resolve_model_dir


@pytest.mark.model
def test_embedded_model_resolves_to_the_cached_copy() -> None:
    path = resolve_model_dir(ModelSpec())
    assert Path(path, "config.json").is_file() and Path(path).parent == gymfleet_home() / "models"
