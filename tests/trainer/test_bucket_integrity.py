"""The bucket after crashes and tampering: a stale LATEST loses to the newest committed version, a
corrupt newest version is skipped (kept) for the previous one, and the learner's state is stored
and read without unpickling anything."""

from __future__ import annotations

import json
import logging
import pickle
import uuid
from pathlib import Path

import pytest
import torch

from gymfleet.trainer.bucket import AdapterBucket, version_name
from gymfleet.trainer.errors import BucketCorruptError
from gymfleet.trainer.learner_state import (
    STATE_FILE,
    check_fits,
    load_learner_state,
    save_learner_state,
)


def _adapter(tmp_path: Path, payload: bytes) -> Path:
    folder = tmp_path / f"adapter-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(payload)
    (folder / "adapter_config.json").write_text("{}")
    return folder


def _two_versions(tmp_path: Path) -> tuple[AdapterBucket, Path]:
    bucket = AdapterBucket(str(tmp_path / "bucket"), "run")
    bucket.publish(1, _adapter(tmp_path, b"one" * 100), {"consumed_group_ids": ["g1"]})
    bucket.publish(2, _adapter(tmp_path, b"two" * 100), {"consumed_group_ids": ["g2"]})
    return bucket, tmp_path / "bucket" / "run" / "adapters"


def test_stale_latest_loses_to_the_newest_committed_version(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bucket, root = _two_versions(tmp_path)
    (root / "LATEST").write_text("1")  # the learner died between the commit of v2 and this update
    with caplog.at_level(logging.WARNING):
        latest = bucket.latest()
    assert latest is not None and latest.version == 2 and latest.meta["consumed_group_ids"] == ["g2"]
    assert "LATEST" in caplog.text


@pytest.mark.parametrize("damage", ["truncated-weights", "bad-meta", "missing-file"])
def test_corrupt_newest_version_is_skipped_and_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                    damage: str) -> None:
    bucket, root = _two_versions(tmp_path)
    v2 = root / version_name(2)
    if damage == "truncated-weights":
        (v2 / "adapter_model.safetensors").write_bytes(b"tw")
    elif damage == "bad-meta":
        (v2 / "meta.json").write_text('{"step": 3, "consumed')
    else:
        (v2 / "adapter_config.json").unlink()
    with caplog.at_level(logging.WARNING):
        latest = bucket.latest()
    assert latest is not None and latest.version == 1
    assert "skipping adapter v000002" in caplog.text and "left in place" in caplog.text
    assert (v2 / "COMMITTED").exists() and bucket.versions() == [1, 2]  # evidence kept
    with pytest.raises(BucketCorruptError):
        bucket.get(2)


def test_fetch_checks_the_bytes_against_the_manifest(tmp_path: Path) -> None:
    bucket, root = _two_versions(tmp_path)
    (root / version_name(2) / "adapter_model.safetensors").write_bytes(b"TWO" * 100)  # same size
    assert bucket.latest().version == 2  # sizes match: only the bytes tell
    with pytest.raises(BucketCorruptError, match="SHA-256"):
        bucket.fetch(2, tmp_path / "copy")
    assert bucket.fetch(1, tmp_path / "copy").is_dir()


def _optimizer() -> torch.optim.Optimizer:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(4))]
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    sum(p.sum() for p in params).backward()
    optimizer.step()
    return optimizer


def test_learner_state_roundtrip_holds_no_pickle(tmp_path: Path) -> None:
    optimizer = _optimizer()
    path = save_learner_state(optimizer, 7, tmp_path)
    assert path.name == STATE_FILE
    header_len = int.from_bytes(path.read_bytes()[:8], "little")
    assert json.loads(path.read_bytes()[8:8 + header_len])["__metadata__"]["step"] == "7"  # plain safetensors
    state, step = load_learner_state(tmp_path)
    assert step == 7
    fresh = _optimizer()
    check_fits(state, fresh)
    fresh.load_state_dict(state)
    for a, b in zip(fresh.state_dict()["state"].values(), optimizer.state_dict()["state"].values(), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in ("exp_avg", "exp_avg_sq", "step"))


class _Payload:
    def __reduce__(self):  # what a bucket writer could plant: code run by any unpickler
        return (Path.touch, (Path(__file__).parent / f"pwned-{uuid.uuid4().hex}",))


def test_a_pickled_state_is_never_read(tmp_path: Path) -> None:
    """Only ``learner_state.safetensors`` is read: a pickle planted beside a version runs nothing."""
    marker_dir = Path(__file__).parent
    before = set(marker_dir.glob("pwned-*"))
    with open(tmp_path / "learner_state.pt", "wb") as f:
        pickle.dump({"optimizer": _Payload(), "step": 1}, f)
    with pytest.raises(BucketCorruptError, match="no learner state"):
        load_learner_state(tmp_path)
    assert set(marker_dir.glob("pwned-*")) == before  # nothing ran


def test_a_state_that_does_not_fit_the_model_is_refused(tmp_path: Path) -> None:
    save_learner_state(_optimizer(), 1, tmp_path)
    state, _ = load_learner_state(tmp_path)
    other = torch.optim.AdamW([torch.nn.Parameter(torch.randn(5, 5)), torch.nn.Parameter(torch.randn(4))])
    with pytest.raises(BucketCorruptError, match="shape"):
        check_fits(state, other)
