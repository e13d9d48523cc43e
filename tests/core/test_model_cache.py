"""The engine's embedded model loads from the de-quantised cache, not the GGUF every start."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.core.models import ModelSpec, gymfleet_home, resolve_model_dir


@pytest.mark.model
def test_embedded_model_resolves_to_the_cached_copy() -> None:
    path = resolve_model_dir(ModelSpec())
    assert Path(path, "config.json").is_file() and Path(path).parent == gymfleet_home() / "models"


def test_the_cache_key_follows_the_gguf_bytes_not_its_path(tmp_path: Path) -> None:
    """A second checkout's virtualenv installs the same GGUF at another path: it must find the
    de-quantised copy the first made (a path-based key de-quantised again, with a progress bar)."""
    from gymfleet.core.models import EDGE_BYTES, _content_key

    data = bytes(range(256)) * ((2 * EDGE_BYTES + 1000) // 256)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.gguf").write_bytes(data)
    assert _content_key(tmp_path / "a" / "m.gguf") == _content_key(tmp_path / "b" / "m.gguf")
    (tmp_path / "b" / "m.gguf").write_bytes(data[:-1] + b"\x00")  # another model: its last byte differs
    assert _content_key(tmp_path / "a" / "m.gguf") != _content_key(tmp_path / "b" / "m.gguf")
