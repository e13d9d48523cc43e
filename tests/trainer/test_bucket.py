"""The adapter bucket commits versions atomically on local and in-memory fsspec file systems."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from gymfleet.trainer.bucket import AdapterBucket, BucketError, version_name


def _adapter(tmp_path: Path, payload: bytes) -> Path:
    d = tmp_path / f"adapter-{uuid.uuid4().hex[:6]}"
    (d / "sub").mkdir(parents=True)
    (d / "adapter_model.safetensors").write_bytes(payload)
    (d / "sub" / "adapter_config.json").write_text("{}")
    return d


@pytest.fixture(params=["local", "memory"])
def bucket_url(request, tmp_path: Path) -> str:
    return str(tmp_path / "bucket") if request.param == "local" else f"memory://b-{uuid.uuid4().hex[:6]}"


def test_publish_latest_fetch_roundtrip(bucket_url: str, tmp_path: Path) -> None:
    bucket = AdapterBucket(bucket_url, "run1")
    assert bucket.latest() is None
    bucket.publish(1, _adapter(tmp_path, b"one"), {"step": 10})
    published = bucket.publish(2, _adapter(tmp_path, b"two"), {"step": 20})
    assert published.meta["step"] == 20
    latest = bucket.latest()
    assert latest is not None and latest.version == 2 and latest.meta["step"] == 20
    assert bucket.versions() == [1, 2]
    out = bucket.fetch(1, tmp_path / "fetched")
    assert (out / "adapter_model.safetensors").read_bytes() == b"one"
    assert (out / "sub" / "adapter_config.json").exists()


def test_versions_are_immutable(bucket_url: str, tmp_path: Path) -> None:
    bucket = AdapterBucket(bucket_url, "run1")
    bucket.publish(1, _adapter(tmp_path, b"one"), {})
    with pytest.raises(BucketError, match="immutable"):
        bucket.publish(1, _adapter(tmp_path, b"again"), {})


def test_uncommitted_version_is_invisible(tmp_path: Path) -> None:
    url = str(tmp_path / "bucket")
    bucket = AdapterBucket(url, "run1")
    bucket.publish(1, _adapter(tmp_path, b"one"), {})
    # A learner killed mid-publish leaves files without the COMMITTED marker.
    half = tmp_path / "bucket" / "run1" / "adapters" / version_name(2)
    half.mkdir()
    (half / "adapter_model.safetensors").write_bytes(b"partial")
    (tmp_path / "bucket" / "run1" / "adapters" / "LATEST").write_text("2")
    assert bucket.versions() == [1]
    assert bucket.latest().version == 1
    with pytest.raises(BucketError, match="not committed"):
        bucket.get(2)
    # Publishing 2 again replaces the half-written attempt.
    bucket.publish(2, _adapter(tmp_path, b"two"), {})
    assert (Path(bucket.fetch(2, tmp_path / "f") / "adapter_model.safetensors")).read_bytes() == b"two"


def test_empty_adapter_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(BucketError, match="holds no files"):
        AdapterBucket(str(tmp_path / "b"), "r").publish(1, tmp_path / "empty", {})
