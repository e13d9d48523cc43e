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
    check_reachable("postgresql+asyncpg://u@db/x", "file:///shared/runs", {"10.0.0.1", "10.0.0.2"})


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


def pg_rows(url: str, sql: str) -> list[tuple[str, ...]]:
    from tests.run.test_collect_shards import pg

    try:
        return pg(url, sql)
    except subprocess.CalledProcessError:  # tables not created yet
        return []


@pytest.mark.model
@pytest.mark.postgres
@pytest.mark.browser
def test_a_mixed_run_on_three_nodes_loses_a_shard_node_and_completes(
    tmp_path: Path, pg_database: str, bwrap_available: bool, chromium_path: str,
) -> None:
    import time

    from ray.cluster_utils import Cluster

    from gymfleet.envs.sandbox import sweep

    os.environ["PYTHONPATH"] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    tasks = [
        {"name": "terminal", "env_id": "gymfleet/Terminal-v0", "env_kwargs": {"sandbox": "local"},
         "instances": ["word-frequency", "log-errors", "organize-files", "permissions"], "group_size": 2,
         "max_turns": 1, "sampling": {"temperature": 1.0, "max_new_tokens": 12}},
        {"name": "miniwob", "env_id": "gymfleet/miniwob.click-test-2-v0", "group_size": 2, "max_turns": 1,
         "sampling": {"temperature": 1.0, "max_new_tokens": 8}},
    ]
    config = tiny_train_config(tmp_path, "ray3", store=pg_database, lease_s=4.0, max_in_flight=2, tasks=tasks,
                               budget={"max_steps": 3}, cluster={"shards": 2, "stop_wait_s": 20})
    bucket = AdapterBucket(str(tmp_path / "bucket"), "ray3")
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"trainer": 1}, "include_dashboard": False})
    cluster.add_node(num_cpus=1, resources={"sandbox": 1})
    doomed = cluster.add_node(num_cpus=1, resources={"sandbox": 1})
    try:
        env = {**os.environ}
        with (tmp_path / "train.log").open("w") as log:
            job = subprocess.Popen([sys.executable, "-m", "gymfleet.cli", "train", str(config), "--no-progress",
                                    "--cluster", cluster.address], cwd=ROOT, env=env, text=True,
                                   stdout=log, stderr=subprocess.STDOUT)
        # Both shards have rollouts in flight (two lease owners) and the learner has published.
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and job.poll() is None:
            owners = pg_rows(pg_database, "SELECT count(DISTINCT lease_owner) FROM samples WHERE state = 'running'")
            if owners and int(owners[0][0]) >= 2 and bucket.versions():
                break
            time.sleep(0.2)
        assert job.poll() is None, (tmp_path / "train.log").read_text()
        assert bucket.versions(), "no version published in time"
        cluster.remove_node(doomed)  # its shard's processes (and sandboxes' owner) are gone at once
        assert job.wait(timeout=600) == 0, (tmp_path / "train.log").read_text()
    finally:
        cluster.shutdown()
    out = (tmp_path / "train.log").read_text()
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["run_status"] == "completed_budget" and report["last_step"] == 3, out
    assert len(report["cluster"]["shards"]) == 1  # the surviving shard reported; the other died with its node

    # The dead shard's rollouts in flight ended aborted (lease expired) and ran again on the survivor.
    # (The survivor's own rollouts in flight at the end are aborted by its stop, and requeued too.)
    aborted = pg_rows(pg_database, "SELECT sample_id, reason FROM trajectories WHERE status = 'aborted'")
    lost = {s for s, reason in aborted if "lease that ran out" in reason}
    assert lost and all(s in lost or "shutting down" in reason for s, reason in aborted), aborted
    # A sample's final trajectory is ok or truncated (one turn: most episodes are cut at max_turns).
    per_sample = dict(pg_rows(pg_database, "SELECT sample_id, count(*) FROM trajectories "
                                           "WHERE status IN ('ok', 'truncated') GROUP BY sample_id"))
    assert set(per_sample.values()) == {"1"}  # no sample finished twice
    done = {s for (s,) in pg_rows(pg_database, "SELECT sample_id FROM samples WHERE state = 'done'")}
    assert done == set(per_sample)  # every finished sample has exactly one final trajectory
    assert lost & done, ("no rollout of the dead shard was finished by the survivor", lost)
    # Both families ran, and the learner never trained a group twice.
    assert {t for (t,) in pg_rows(pg_database, "SELECT DISTINCT task FROM trajectories "
                                             "WHERE status IN ('ok', 'truncated')")} == {"terminal", "miniwob"}
    consumed = [g for v in bucket.versions() for g in bucket.get(v).meta["consumed_group_ids"]]
    assert consumed and len(consumed) == len(set(consumed))
    # No sandbox of the run is left on this machine (the launcher swept the nodes).
    import asyncio

    assert sum(r.removed for r in asyncio.run(sweep(run_id="ray3", expired_only=False))) == 0
