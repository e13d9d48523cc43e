"""Replicas that copy adapters from the bucket themselves (``train --cluster``'s replica actors):
the client passes the bucket URL through, the app copies it into its cache before loading, and a
name already loaded is not loaded twice (a restarted shard loads again what its replica holds)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from gymfleet.orchestrator.engines.server import build_app
from gymfleet.orchestrator.engines.vllm import VLLMEngine, VLLMEngineConfig
from gymfleet.run.follow import BucketFollower
from gymfleet.trainer.bucket import AdapterBucket
from tests.orchestrator.fake_engine import FakeEngine


class LoadRecorder(FakeEngine):
    """A FakeEngine that remembers the path of every load."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.loaded_from: list[str] = []

    async def load_adapter(self, name: str, path: str) -> None:
        self.loaded_from.append(path)
        await super().load_adapter(name, path)


def publish(tmp_path: Path, bucket_url: str, version: int = 1) -> AdapterBucket:
    local = tmp_path / f"trained-{version}"
    local.mkdir()
    (local / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    (local / "adapter_model.safetensors").write_bytes(b"weights")
    bucket = AdapterBucket(bucket_url, "run")
    bucket.publish(version, local, {"step": version})
    return bucket


def client(engine: FakeEngine, cache: Path | None, **config: object) -> VLLMEngine:
    app = build_app(engine, "base", adapter_cache=cache)  # type: ignore[arg-type]
    return VLLMEngine(VLLMEngineConfig(base_url="http://replica", model="base", **config),
                      transport=httpx.ASGITransport(app=app))


async def test_the_replica_copies_a_bucket_url_into_its_cache_then_loads_the_copy(tmp_path: Path) -> None:
    url = publish(tmp_path, "memory://bucket-replica-urls").get(1).url
    engine = LoadRecorder("r0")
    async with client(engine, tmp_path / "cache", replica_reads_urls=True) as replica:
        await replica.load_adapter("run-v000001", url)
        await replica.load_adapter("run-v000001", url)  # again (a restarted shard): no second load
        assert engine.adapters == {"run-v000001"}
        (path,) = engine.loaded_from
        assert Path(path) == tmp_path / "cache" / "run-v000001"
        assert (Path(path) / "adapter_model.safetensors").read_bytes() == b"weights"
        await replica.unload_adapter("run-v000001")  # the cache holds only what is loaded
    assert not Path(path).exists() and not engine.adapters


async def test_without_a_cache_the_app_hands_the_path_as_given(tmp_path: Path) -> None:
    engine = LoadRecorder("r0")
    async with client(engine, None) as replica:
        await replica.load_adapter("run-v000001", "/shared/bucket/run/v000001")
    assert engine.loaded_from == ["/shared/bucket/run/v000001"]


def test_replica_reads_urls_and_adapter_dir_exclude_each_other() -> None:
    with pytest.raises(ValidationError, match="drop adapter_dir"):
        VLLMEngineConfig(base_url="http://r", model="m", replica_reads_urls=True, adapter_dir="/tmp/a")


class RecordingGateway:
    """The follower's AdapterGateway: records what it is asked to publish."""

    def __init__(self) -> None:
        self.policy_version = 0
        self.published: list[tuple[int, str]] = []

    async def publish_adapter(self, version: int, path: str) -> str:
        self.published.append((version, path))
        self.policy_version = version
        return f"run-v{version:06d}"


async def test_a_follower_that_does_not_fetch_hands_the_engines_the_bucket_url(tmp_path: Path) -> None:
    bucket = publish(tmp_path, "memory://bucket-follow-urls")
    gateway = RecordingGateway()
    await BucketFollower(bucket, tmp_path / "local", fetch_remote=False).load_newest(gateway)
    assert gateway.published == [(1, bucket.get(1).url)] and not (tmp_path / "local").exists()
    fetched = RecordingGateway()
    await BucketFollower(bucket, tmp_path / "local").load_newest(fetched)  # the default: a local copy
    assert fetched.published[0][1].startswith(str(tmp_path / "local"))
