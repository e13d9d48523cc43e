"""A bucket version a tamperer wrote into: copies (the learner's resume fetch, a replica's adapter
copy) read only the files its manifest lists, never through a symlink, never past a size bound."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from gymfleet.orchestrator.engines.adapters import copy_adapter
from gymfleet.trainer.bucket import AdapterBucket, version_name
from gymfleet.trainer.errors import BucketCorruptError

GIB = 1 << 30
SECRET = b"root:$6$secret-hash:19000:0:99999:7:::\n"


def _publish(tmp_path: Path, **bucket_args: int) -> tuple[AdapterBucket, Path]:
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    (trained / "adapter_model.safetensors").write_bytes(b"weights" * 10)
    bucket = AdapterBucket(str(tmp_path / "bucket"), "run", **bucket_args)
    bucket.publish(1, trained, {"step": 1})
    return bucket, tmp_path / "bucket" / "run" / "adapters" / version_name(1)


def _secret(tmp_path: Path) -> Path:
    """Stands in for /etc/shadow: a 0600 file the copy must never read."""
    path = tmp_path / "shadow"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


def _sparse(path: Path, size: int = GIB) -> None:
    with open(path, "wb") as f:
        f.truncate(size)


def _forge_manifest(version_dir: Path, name: str, size: int, sha256: str = "0" * 64) -> None:
    meta = json.loads((version_dir / "meta.json").read_text())
    meta["files"][name] = {"size": size, "sha256": sha256}
    (version_dir / "meta.json").write_text(json.dumps(meta))


def _all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def test_fetch_ignores_files_the_manifest_does_not_list(tmp_path: Path) -> None:
    bucket, v1 = _publish(tmp_path)
    os.symlink(_secret(tmp_path), v1 / "learner_state.safetensors")
    _sparse(v1 / "padding.bin")
    copy = bucket.fetch(1, tmp_path / "cache")
    assert sorted(p.name for p in copy.iterdir()) == ["adapter_config.json", "adapter_model.safetensors", "meta.json"]
    assert SECRET not in _all_bytes(copy)


def test_a_listed_file_swapped_for_a_symlink_is_refused(tmp_path: Path) -> None:
    bucket, v1 = _publish(tmp_path)
    secret = _secret(tmp_path)
    (v1 / "adapter_model.safetensors").unlink()
    os.symlink(secret, v1 / "adapter_model.safetensors")
    _forge_manifest(v1, "adapter_model.safetensors", len(SECRET), hashlib.sha256(SECRET).hexdigest())
    with pytest.raises(BucketCorruptError, match="symbolic link"):
        bucket.fetch(1, tmp_path / "cache")
    assert bucket.latest() is None  # the only version is skipped, kept
    cache = tmp_path / "cache"
    assert not cache.exists() or SECRET not in _all_bytes(cache)


def test_a_sparse_file_listed_past_the_bound_is_refused_not_written_dense(tmp_path: Path) -> None:
    bucket, v1 = _publish(tmp_path, max_file_bytes=64 << 20)
    _sparse(v1 / "adapter_model.bin")
    _forge_manifest(v1, "adapter_model.bin", GIB)
    with pytest.raises(BucketCorruptError, match="over the bound"):
        bucket.fetch(1, tmp_path / "cache")
    assert not (tmp_path / "cache" / version_name(1) / "adapter_model.bin").exists()


def test_a_manifest_name_leaving_the_version_is_refused(tmp_path: Path) -> None:
    bucket, v1 = _publish(tmp_path)
    _forge_manifest(v1, "../../../shadow", len(SECRET))
    _secret(tmp_path / "bucket")
    with pytest.raises(BucketCorruptError, match="leaves its folder"):
        bucket.get(1)


def test_the_replicas_adapter_copy_follows_the_manifest_and_no_symlink(tmp_path: Path) -> None:
    bucket, v1 = _publish(tmp_path)
    _sparse(v1 / "adapter_model.bin")  # a name a LoRA server reads, but not in the manifest
    copied = Path(copy_adapter(str(v1), str(tmp_path / "disk"), "run-v000001"))
    assert sorted(p.name for p in copied.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]

    (v1 / "adapter_model.safetensors").unlink()
    os.symlink(_secret(tmp_path), v1 / "adapter_model.safetensors")
    with pytest.raises(ValueError, match="symbolic link"):
        copy_adapter(str(v1), str(tmp_path / "disk2"), "run-v000001")
    assert SECRET not in _all_bytes(tmp_path / "disk2")

    (v1 / "adapter_model.safetensors").unlink()
    (v1 / "adapter_model.safetensors").write_bytes(b"weights" * 10)
    _forge_manifest(v1, "adapter_model.bin", GIB)
    with pytest.raises(ValueError, match="over the bound"):
        copy_adapter(str(v1), str(tmp_path / "disk3"), "run-v000001", max_file_bytes=64 << 20)


def test_a_plain_peft_folder_with_a_symlinked_weight_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "peft"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    os.symlink(_secret(tmp_path), folder / "adapter_model.safetensors")
    with pytest.raises(ValueError, match="symbolic link"):
        copy_adapter(str(folder), str(tmp_path / "disk"), "x")


def test_the_next_version_is_past_the_newest_committed_one(tmp_path: Path) -> None:
    bucket, v1 = _publish(tmp_path)
    assert bucket.newest_version() == 1
    (v1 / "adapter_model.safetensors").write_bytes(b"x")  # corrupt: latest() skips it, it still counts
    assert bucket.latest() is None and bucket.newest_version() == 1
