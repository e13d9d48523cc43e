"""`gymfleet train --cluster`: the run's roles as Ray actors on a cluster made on this machine
(`ray.cluster_utils.Cluster`: a head node offering the learner's resource, worker nodes offering
`sandbox`), driven by the real CLI in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymfleet.core.errors import ConfigError
from gymfleet.run.cluster import check_reachable
from gymfleet.trainer import AdapterBucket
from tests.e2e.train_helpers import ROOT, tiny_train_config

ray = pytest.importorskip("ray") if os.environ.get("CI") != "true" else __import__("ray")


def test_a_local_bucket_or_sqlite_store_is_refused_on_several_hosts() -> None:
    check_reachable("runs/x/store.db", "runs/x/bucket", {"10.0.0.1"})  # one host: fine
    with pytest.raises(ConfigError, match="bucket 'runs/x/bucket' is a local path.*2 hosts"):
        check_reachable("postgresql+asyncpg://u@db/x", "runs/x/bucket", {"10.0.0.1", "10.0.0.2"})
    with pytest.raises(ConfigError, match="SQLite file.*PostgreSQL URL"):
        check_reachable("runs/x/store.db", "s3://b/runs", {"10.0.0.1", "10.0.0.2"})
    check_reachable("postgresql+asyncpg://u@db/x", "s3://b/runs", {"10.0.0.1", "10.0.0.2"})


@pytest.fixture
def cluster() -> Iterator[object]:
    from ray.cluster_utils import Cluster

    os.environ["PYTHONPATH"] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"  # the test envs
    made = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"trainer": 1}, "include_dashboard": False})
    made.add_node(num_cpus=1, resources={"sandbox": 1})
    try:
        yield made
    finally:
        made.shutdown()


@pytest.mark.model
def test_train_places_a_shard_and_the_learner_on_the_cluster(tmp_path: Path, cluster) -> None:
    config = tiny_train_config(tmp_path, "ray1", budget={"max_steps": 2}, cluster={"shards": 1})
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "gymfleet.cli", "train", str(config), "--no-progress",
                           "--cluster", cluster.address], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    assert proc.returncode == 0, proc.stdout
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["run_status"] == "completed_budget" and report["last_step"] == 2, report
    (shard,) = report["cluster"]["shards"]
    assert shard["completed"] > 0 and shard["by_status"].get("ok", 0) > 0, shard
    assert AdapterBucket(str(tmp_path / "bucket"), "ray1").versions() == [1, 2]
