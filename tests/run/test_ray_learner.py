"""The data-parallel learner on Ray (`train --cluster` with `learner.world_size: 2`): each rank a
Ray actor of its own in one placement group, on a local Ray of 2 CPUs, the real model, the real
`learn` loop and SQLite store. The same claimed groups give the adapter one in-process rank gives;
a rank actor SIGKILLed fails its step, and the learner starts again from the last published
version with a new rank actor, training no group twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gymfleet.core.errors import ConfigError
from gymfleet.run.config import ClusterConfig
from gymfleet.run.ray_learner import rank_bundle
from tests.trainer.test_data_parallel import RUN, _adapter, _args, _consumed, _fill, _learn, _steps

ray = pytest.importorskip("ray") if os.environ.get("CI") != "true" else __import__("ray")


def test_each_rank_asks_for_the_learners_resources_and_an_empty_rank_is_refused() -> None:
    assert rank_bundle(ClusterConfig(learner_cpus=2, learner_gpus=1)) == {"CPU": 2, "GPU": 1, "trainer": 1}
    assert rank_bundle(ClusterConfig(learner_gpus=0)) == {"CPU": 1, "trainer": 1}  # Ray refuses 0 in a bundle
    with pytest.raises(ConfigError, match="learner_cpus: 1"):
        rank_bundle(ClusterConfig(learner_cpus=0, learner_resources={}))


def _command(pid: int) -> str:
    return subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()


@pytest.fixture
def local_ray() -> Iterator[object]:
    ray.init(num_cpus=2, resources={"trainer": 2}, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.mark.model
@pytest.mark.slow
async def test_ranks_are_ray_actors_that_train_what_one_rank_trains_and_a_lost_rank_is_retried(
        tmp_path: Path, local_ray: object) -> None:
    from gymfleet.run.ray_learner import RayLearner, RayRanks, in_bundle, learner_placement

    one, two = _args(tmp_path, "one", 1, 1), _args(tmp_path, "two", 2, 2)
    for args in (one, two):
        await _fill(args.store_url, ["g1", "g2"])
    await _learn(one)  # the reference: one rank, in this process

    cl = ClusterConfig(learner_cpus=1)
    group = learner_placement(ray, cl, 2)
    learner = RayLearner(two, ray, {"num_cpus": 1, "resources": {"trainer": 1}, "max_concurrency": 2,
                                    **in_bundle(group, 0)}, RayRanks(group, cl, RUN), rank_retries=1)
    learner.start()
    try:
        rank1_pid = Path(two.report_dir, "learner.rank1.pid")
        deadline = time.monotonic() + 300
        while (not Path(two.report_dir, "learner.jsonl").exists() or not _steps(two)) and learner.alive():
            assert time.monotonic() < deadline, "the 2-rank learner on Ray made no step in 300 s"
            await asyncio.sleep(0.2)
        first = int(rank1_pid.read_text())
        assert _command(first).startswith("ray::RankRole"), _command(first)  # rank 1: an actor's process
        os.kill(first, signal.SIGKILL)
        await _fill(two.store_url, ["g3", "g4"])  # the next step's broadcast finds rank 1 gone
        end = await asyncio.to_thread(ray.get, learner.ref, timeout=300)
    finally:
        learner.kill()
    assert end is not None and end.step == 2

    # step 1 on two Ray ranks = one rank (as tests/trainer/test_data_parallel.py checks for processes)
    rows_one, rows_two = _steps(one), _steps(two)
    assert [r["step"] for r in rows_two] == [1, 2] and {r["world_size"] for r in rows_two} == {2}
    for a, b in zip(rows_one, rows_two[:1], strict=True):
        for key in ("loss", "kl_ref", "grad_norm", "learning_rate", "n_tokens"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-7), key
    for name, tensor in _adapter(one, 1).items():
        torch.testing.assert_close(_adapter(two, 1)[name], tensor, rtol=1e-3, atol=1e-4)

    # the lost rank failed step 2 once; the learner started again from v1 with a new rank actor
    starts = [json.loads(line) for line in Path(two.report_dir, "learner.jsonl").read_text().splitlines()]
    starts = [r for r in starts if r.get("event") == "start"]
    assert [(s["step"], s["resumed"]) for s in starts] == [(0, False), (1, True)], starts
    assert int(rank1_pid.read_text()) != first
    consumed = _consumed(two)
    assert sorted(consumed) == sorted(f"{RUN}/echo/p0/g{i}" for i in range(1, 5)) and len(set(consumed)) == 4
    assert [v.name for v in sorted((Path(two.bucket_url) / RUN / "adapters").glob("v0*"))] == ["v000001", "v000002"]
