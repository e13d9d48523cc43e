"""Replicas check a version's checksum before loading it and skip to the last good one, as the
learner does: a corrupt newest version (same size, other bytes) is never loaded, whether the
follower copies it for the engines or the replica copies it from the bucket itself."""

from __future__ import annotations

from pathlib import Path

from gymfleet.run.follow import BucketFollower
from gymfleet.trainer.bucket import AdapterBucket
from tests.orchestrator.test_replica_adapter_urls import LoadRecorder, RecordingGateway, client, publish


def corrupt(bucket: AdapterBucket, version: int, root: Path) -> None:
    """Flips the weights of ``version`` in a local bucket, keeping their size (only the SHA-256 tells)."""
    (weights,) = root.rglob(f"v{version:06d}/adapter_model.safetensors")
    weights.write_bytes(bytes(b ^ 0xFF for b in weights.read_bytes()))


def two_versions(tmp_path: Path) -> AdapterBucket:
    url = str(tmp_path / "bucket")
    publish(tmp_path, url, version=1)
    bucket = publish(tmp_path, url, version=2)
    corrupt(bucket, 2, tmp_path / "bucket")
    return bucket


async def test_the_follower_skips_a_corrupt_version_to_the_last_good_one(tmp_path: Path) -> None:
    bucket = two_versions(tmp_path)
    gateway = RecordingGateway()
    follower = BucketFollower(bucket, tmp_path / "local")
    await follower.load_newest(gateway)
    assert [v for v, _ in gateway.published] == [1], gateway.published
    assert [f.version for f in follower.failures] == [2] and "SHA-256" in follower.failures[0].error
    await follower.load_newest(gateway)  # nothing newer that is good: v1 stays served
    assert [v for v, _ in gateway.published] == [1]


async def test_a_replica_reading_urls_refuses_a_corrupt_version(tmp_path: Path) -> None:
    bucket = two_versions(tmp_path)
    engine = LoadRecorder("r0")
    async with client(engine, tmp_path / "cache", replica_reads_urls=True) as replica:
        follower = BucketFollower(bucket, tmp_path / "local", fetch_remote=False)
        follower.retries = follower.retries.model_copy(update={"attempts": 1, "retry_wait_s": 0.01})

        class Publisher(RecordingGateway):
            async def publish_adapter(self, version: int, path: str) -> str:
                await replica.load_adapter(f"run-v{version:06d}", "file://" + path.removeprefix("file://"))
                return await super().publish_adapter(version, path)

        gateway = Publisher()
        await follower.load_newest(gateway)  # v2: the replica refuses it
        assert engine.adapters == set() and "SHA-256" in follower.failures[0].error
        await follower.load_newest(gateway)  # then the last good one
    assert engine.adapters == {"run-v000001"}
