"""`gymfleet train --cluster`: the run's roles as Ray actors on a cluster made on this machine
(`ray.cluster_utils.Cluster`: a head node offering the learner's resource, worker nodes offering
`sandbox`), driven by the real CLI in its own process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymfleet.core.errors import ConfigError
from gymfleet.orchestrator.store.schema import RunStatus
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


def pids(title: str) -> set[int]:
    """PIDs of the processes whose command line holds ``title`` (Ray names an actor's worker
    process ``ray::<Class>...``) and that descend from this test process (its cluster's raylets
    start them): another cluster on the same machine is not this test's."""
    found = subprocess.run(["pgrep", "-f", title], capture_output=True, text=True)
    return {int(p) for p in found.stdout.split() if _descends_from_me(int(p))}


def _descends_from_me(pid: int) -> bool:
    while pid > 1:
        if pid == os.getpid():
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
    return False


@pytest.mark.model
@pytest.mark.postgres
def test_replica_actors_serve_a_shard_and_killed_actors_are_restarted(tmp_path: Path, pg_database: str) -> None:
    """Two nodes: the head offers the learner's resource, a worker offers `sandbox` and
    `inference`. The shard samples from an embedded replica actor over HTTP; once v1 is published
    the learner's and the shard's processes are SIGKILLed: Ray restarts both, the learner resumes
    from the bucket and the shard from the store, and the run completes with no group trained twice."""
    import signal
    import time

    from ray.cluster_utils import Cluster

    os.environ["PYTHONPATH"] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"  # the test envs
    config = tiny_train_config(tmp_path, "ray1", store=pg_database, lease_s=4.0, budget={"max_steps": 3},
                               cluster={"shards": 1, "replicas_per_shard": 1, "stop_wait_s": 20})
    bucket = AdapterBucket(str(tmp_path / "bucket"), "ray1")
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"trainer": 1}, "include_dashboard": False})
    cluster.add_node(num_cpus=2, resources={"sandbox": 1, "inference": 1})
    try:
        with (tmp_path / "train.log").open("w") as log:
            job = subprocess.Popen([sys.executable, "-m", "gymfleet.cli", "train", str(config), "--no-progress",
                                    "--cluster", cluster.address], cwd=ROOT, env={**os.environ}, text=True,
                                   stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and job.poll() is None and not bucket.versions():
            time.sleep(0.2)
        assert job.poll() is None and bucket.versions(), (tmp_path / "train.log").read_text()
        killed = pids("ray::LearnerRole") | pids("ray::ShardRole")
        assert len(killed) == 2, killed
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        assert job.wait(timeout=600) == 0, (tmp_path / "train.log").read_text()
    finally:
        cluster.shutdown()
    out = (tmp_path / "train.log").read_text()
    assert "1 shard(s), 1 replica actor(s), 1 learner" in " ".join(out.split()), out
    # the plain progress line of a one-machine run, every 10 s, read from the store
    assert re.search(r"^\[ray1 \d\d:\d\d\] rollouts \d+ done .* · policy v\d+ · learner step \S+$", out, re.M), out
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["run_status"] == "completed (budget)" and report["last_step"] == 3, out
    assert report["wall_time"]["stages_s"]["grpo"] > 0  # the cluster report says where the time went too
    assert bucket.versions() == [1, 2, 3]
    # The learner was restarted and resumed from the bucket (not from step 0).
    starts = [json.loads(line) for line in (tmp_path / "report" / "learner.jsonl").read_text().splitlines()
              if '"event": "start"' in line]
    assert len(starts) == 2 and starts[1]["resumed"] and starts[1]["step"] >= 1, starts
    consumed = [g for v in bucket.versions() for g in bucket.get(v).meta["consumed_group_ids"]]
    assert consumed and len(consumed) == len(set(consumed))  # no group trained twice
    # The restarted shard reported, and its rollouts came from the replica actor, which loaded
    # the learner's versions from the bucket itself.
    (shard,) = report["cluster"]["shards"]
    # The restarted shard reported. It may have finished nothing itself: when its first life had
    # already stored the groups the 3-step budget needs, the budget ends while it is resuming
    # (seen once in a full CI run); the store below holds every sample it and its first life ran.
    assert shard["status"] in {s.value for s in RunStatus}, shard
    assert shard["completed"] > 0 or shard["status"] == RunStatus.interrupted.value, shard
    (replica,) = report["cluster"]["replicas"]
    assert replica["generated_tokens"] > 0 and replica["adapters"], replica
    per_sample = dict(pg_rows(pg_database, "SELECT sample_id, count(*) FROM trajectories "
                                           "WHERE status IN ('ok', 'truncated') GROUP BY sample_id"))
    assert per_sample and set(per_sample.values()) == {"1"}  # no sample finished twice
    # `runs list` reads the store: it says what the run said, though the shards were stopped from outside
    assert pg_rows(pg_database, "SELECT status FROM runs WHERE run_id = 'ray1'") == [(RunStatus.completed_budget.name,)]


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
         "instances": ["word-frequency", "log-errors", "organize-files"], "group_size": 2,
         "max_turns": 1, "sampling": {"max_new_tokens": 12}},
        {"name": "miniwob", "env_id": "gymfleet/miniwob.click-test-2-v0", "group_size": 2, "max_turns": 1,
         "sampling": {"max_new_tokens": 8}},
    ]
    config = tiny_train_config(tmp_path, "ray3", store=pg_database, lease_s=4.0, max_in_flight=2, tasks=tasks,
                               budget={"max_steps": 5},
                               cluster={"shards": 2, "replicas_per_shard": 1, "stop_wait_s": 20},
                               heldout={"enabled": True, "instances": {"terminal": ["permissions"]},
                                        "samples_per_instance": 2})
    bucket = AdapterBucket(str(tmp_path / "bucket"), "ray3")
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 3, "resources": {"trainer": 1, "inference": 2}, "include_dashboard": False})
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
        # The run must outlast the dead shard's leases: they lapse up to lease_s after the node goes,
        # then the survivor reruns them (about 3 s). The learner trains from groups already done
        # (about 5 s a step here), so the four steps left after the first publish give it about
        # 20 s; with two left, a CI run ended before the survivor finished the requeued rollouts.
        cluster.remove_node(doomed)  # its shard's processes (and sandboxes' owner) are gone at once
        assert job.wait(timeout=600) == 0, (tmp_path / "train.log").read_text()
    finally:
        cluster.shutdown()
    out = (tmp_path / "train.log").read_text()
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["run_status"] == "completed (budget)" and report["last_step"] == 5, out
    assert len(report["cluster"]["shards"]) == 1  # the surviving shard reported; the other died with its node
    assert len(report["cluster"]["replicas"]) == 2  # one replica actor per shard, on the inference node
    assert all(r["generated_tokens"] > 0 for r in report["cluster"]["replicas"]), report["cluster"]["replicas"]
    # The held-out evaluation of the base model and the final adapter ran on a StageRole actor of
    # the cluster, not in the launcher.
    terminal = report["evaluation"]["by_family"]["terminal"]
    assert terminal["base"]["n"] == 2 and terminal["final"]["n"] == 2, terminal
    assert "held-out pass@1" in out, out
    (where,) = report["cluster"]["stages"].values()
    assert int(re.match(r"ray::StageRole pid (\d+) on node \w+", where).group(1)) != job.pid, where

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


def test_replica_actors_serve_the_runs_embedded_engine_and_refuse_other_kinds() -> None:
    from gymfleet.orchestrator.config import RunConfig
    from gymfleet.run.ray_replica import replica_engine, shard_policy_engines
    from gymfleet.run.config import ClusterConfig

    tasks = [{"env_id": "gymfleet/Terminal-v0"}]
    run = RunConfig.model_validate({"run_id": "r", "tasks": tasks,
                                    "policy": {"engines": [{"kind": "transformers", "max_batch_size": 3}]}})
    engine = replica_engine(run, ClusterConfig(replicas_per_shard=1, replica_cpus=2), 5)
    assert engine["name"] == "replica-5" and engine["max_batch_size"] == 3 and engine["n_threads"] == 2
    # A shard's policy: the replicas' URLs as HTTP replicas that copy adapters themselves.
    shard = RunConfig.model_validate({"run_id": "r", "tasks": tasks, "policy": {
        "engines": shard_policy_engines([("http://10.0.0.7:8100", "http://10.0.0.7:8101")], 2, "tok"),
        "parity": {"enabled": False}}})
    (replica,) = shard.policy.engines
    assert (replica.kind, replica.base_url, replica.name, replica.replica_reads_urls) == (
        "vllm", "http://10.0.0.7:8100", "replica-2", True)
    # load/unload go to the replica's admin listener, with the run's token (not the dumped mask)
    assert replica.admin_url == "http://10.0.0.7:8101" and replica.admin_token.get_secret_value() == "tok"
    vllm = RunConfig.model_validate({"run_id": "r", "tasks": tasks, "policy": {
        "engines": [{"kind": "vllm", "base_url": "http://h:8000", "model": "m"}]}})
    with pytest.raises(ConfigError, match="replicas_per_shard: 0"):
        replica_engine(vllm, ClusterConfig(replicas_per_shard=1), 0)


def test_roles_asking_for_resources_no_node_offers_are_refused_with_the_flag_to_add() -> None:
    from gymfleet.run.cluster import check_resources
    from gymfleet.run.config import ClusterConfig

    offered = {"CPU": 4.0, "trainer": 1.0, "sandbox": 2.0}
    check_resources(offered, ClusterConfig())  # no replica actors: nothing asks for `inference`
    with pytest.raises(ConfigError, match=r"each replica asks for 1 inference.*offers 0.*--resources='\{\"inference\": 1\}'"):
        check_resources(offered, ClusterConfig(replicas_per_shard=1))
    with pytest.raises(ConfigError, match="each learner asks for 1 GPU.*--num-gpus"):
        check_resources(offered, ClusterConfig(learner_gpus=1))


@pytest.mark.model
def test_the_warm_start_and_the_heldout_stages_run_on_ray_actors(tmp_path: Path) -> None:
    """`RayPlacement`'s roles around GRPO: the warm start on a StageRole actor on the learner's
    resource (v1 published to the bucket) and the held-out evaluation of the base on one on a
    shard's resource, each in a process of its own, its result handed back to the launcher."""
    import asyncio

    from ray.cluster_utils import Cluster
    from rich.console import Console

    from gymfleet.run.cluster import RayPlacement
    from gymfleet.run.config import load_train_config

    os.environ["PYTHONPATH"] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"  # the test envs
    cfg = load_train_config(tiny_train_config(
        tmp_path, "stages", warmstart={"enabled": True, "epochs": 1, "max_instances_per_task": 2},
        heldout={"enabled": True, "instances": {"echo": ["w006"]}, "samples_per_instance": 2},
        cluster={"shards": 1}))
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {"trainer": 1, "sandbox": 1}, "include_dashboard": False})
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        placement = RayPlacement(ray, cluster.address, {"127.0.0.1"})
        console = Console(stderr=True)
        warm = asyncio.run(placement.warm_start(cfg, console))
        base = asyncio.run(placement.heldout(cfg, console, base_only=True))
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert warm is not None and warm.sft.version == 1
    assert AdapterBucket(str(tmp_path / "bucket"), "stages").versions() == [1]
    assert base.scores["echo"]["base"].n == 2
    assert set(placement.stages) == {"warm_start", "heldout_base"}, placement.stages
    for where in placement.stages.values():
        assert int(re.match(r"ray::StageRole pid (\d+) on node \w+", where).group(1)) != os.getpid(), where
