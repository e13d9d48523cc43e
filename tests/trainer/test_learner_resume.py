"""A learner restarted on a bucket a crash or a tamperer left behind (real embedded model): a
stale LATEST, then a corrupt newest version, then nothing that loads."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from gymfleet.trainer.bucket import AdapterBucket, version_name
from gymfleet.trainer.errors import BucketError
from gymfleet.trainer.learner import Learner, LearnerConfig
from gymfleet.trainer.rollout_policy import RolloutPolicy
from gymfleet.trainer.learner_state import STATE_FILE
from tests.trainer.test_learner import MemoryGroupSource

pytestmark = pytest.mark.model

CONFIG = LearnerConfig(lora_rank=1, lora_alpha=4, groups_per_step=1, micro_batch_size=1,
                       target_modules=["q_proj", "v_proj"])


async def test_resume_after_a_stale_latest_and_a_corrupt_newest_version(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    bucket = AdapterBucket(str(tmp_path / "bucket"), "run")
    root = tmp_path / "bucket" / "run" / "adapters"
    source = MemoryGroupSource({})
    first = Learner(CONFIG, RolloutPolicy(), source, bucket)
    for step, groups in ((3, ["g1"]), (6, ["g2"])):
        first.step, first._pending = step, list(groups)
        await first.publish()
    assert not (root / version_name(2) / "learner_state.pt").exists()
    assert (root / version_name(2) / STATE_FILE).exists()

    # A crash between the commit of v2 and the LATEST update: v2 wins, its groups are acked.
    (root / "LATEST").write_text("1")
    source.acked.clear()
    second = Learner(CONFIG, RolloutPolicy(), source, bucket, claimer="learner-2")
    assert await second.resume()
    assert (second.version, second.step) == (2, 6) and source.acked == {"g2"}
    second._pending = ["g3"]
    assert await second.publish() == 3  # before: resumed at v1, then every publish of v2 failed

    # v3's optimiser state is damaged, its manifest rewritten to match (a tamperer): skipped with
    # a warning when it fails to load, v2 resumes, v3 stays for people to look at.
    junk = b"\x10\x00\x00\x00\x00\x00\x00\x00{not json"
    (root / version_name(3) / STATE_FILE).write_bytes(junk)
    meta = json.loads((root / version_name(3) / "meta.json").read_text())
    meta["files"][STATE_FILE] = {"size": len(junk), "sha256": hashlib.sha256(junk).hexdigest()}
    (root / version_name(3) / "meta.json").write_text(json.dumps(meta))
    source.acked.clear()
    with caplog.at_level(logging.WARNING):
        third = Learner(CONFIG, RolloutPolicy(), source, bucket, claimer="learner-3")
        assert await third.resume()
    assert (third.version, third.step) == (2, 6) and source.acked == {"g2"}
    assert "not resuming from adapter v3" in caplog.text
    assert (root / version_name(3) / "COMMITTED").exists()
    third._pending = ["g4"]
    assert await third.publish() == 4  # past the corrupt v3 (before: "v000003 is already committed")
    assert (third.version, bucket.versions()) == (4, [1, 2, 3, 4])

    # Nothing loads any more: a one-line error names the versions, nothing is deleted.
    for version in (1, 2):
        (root / version_name(version) / "adapter_model.safetensors").write_bytes(b"junk")
    (root / version_name(4) / "adapter_model.safetensors").write_bytes(b"junk")
    with pytest.raises(BucketError, match=r"none of the committed adapters \[1, 2, 3, 4\]"):
        await Learner(CONFIG, RolloutPolicy(), source, bucket, claimer="learner-4").resume()
    assert bucket.versions() == [1, 2, 3, 4]


async def test_a_publish_carries_its_step_row_and_a_resume_writes_back_a_lost_one(tmp_path: Path) -> None:
    from gymfleet.trainer.learner import StepMetrics
    from gymfleet.trainer.step_log import StepRow, encode
    from gymfleet.trainer.worker import _missing_step_row

    bucket = AdapterBucket(str(tmp_path / "bucket"), "run")
    source = MemoryGroupSource({})
    first = Learner(CONFIG, RolloutPolicy(), source, bucket)
    first.step, first._pending = 5, ["g1"]
    assert await first.publish(StepMetrics(5, 0.25, 0.0, 1.0, 0.0, 12, 1, 0.5)) == 1
    second = Learner(CONFIG, RolloutPolicy(), source, bucket, claimer="learner-2")
    assert await second.resume()
    row = second.resumed_step_row
    assert row is not None and (row["step"], row["loss"], row["published_version"]) == (5, 0.25, 1)

    # learner.jsonl lost step 5's row (killed between the publish and the row): written back, marked
    steps = tmp_path / "learner.jsonl"
    step_4 = StepRow(**vars(StepMetrics(4, 0.5, 0.0, 1.0, 0.0, 10, 1, 0.5)), version=1)
    steps.write_text(json.dumps(encode(step_4)) + "\n" + '{"event": "st')  # a torn last line
    missing = _missing_step_row(steps, row)
    assert missing is not None and (missing.step, missing.loss, missing.version, missing.recovered) == (5, 0.25, 1, True)
    steps.write_text(json.dumps(encode(missing)) + "\n")
    assert _missing_step_row(steps, row) is None  # the row is there: nothing is written twice
    assert _missing_step_row(tmp_path / "absent.jsonl", None) is None
