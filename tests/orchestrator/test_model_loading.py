"""The engine's embedded model loads from the de-quantised cache, not the GGUF every start."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.models import gymfleet_home
from gymfleet.orchestrator.engines.model_loading import ModelSource, resolve


@pytest.mark.model
def test_embedded_model_resolves_to_the_cached_copy() -> None:
    path, gguf_file = resolve(ModelSource())
    assert gguf_file is None
    assert Path(path, "config.json").is_file() and Path(path).parent == gymfleet_home() / "models"
