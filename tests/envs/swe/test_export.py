"""`gymfleet runs export RUN --format swebench`: a run's gymfleet/SWE-v0 patches as predictions."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.envs.swe.predictions import load_predictions
from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.orchestrator.store.workqueue import GroupSpec
from tests.orchestrator.store.conftest import make_trajectory

RUN = "swe-train"
SEMVER = "python-semver__python-semver-426"
HUMANIZE = "python-humanize__humanize-159"


def fill(db: Path) -> None:
    """Two SWE groups (rewards 0/1 and 0/0, one episode never submitted) and one echo group."""
    groups = [(SEMVER, "gymfleet/SWE-v0", [(0.0, "bad"), (1.0, "good"), (0.0, None)]),
              (HUMANIZE, "gymfleet/SWE-v0", [(0.0, "try1"), (0.0, "try2")]),
              ("echo-1", "gymfleet-test/Echo-v0", [(1.0, "not-a-patch")])]

    async def go() -> None:
        async with await TrajectoryStore.open(str(db)) as store:
            await store.start_run(RUN, {})
            for instance, env_id, samples in groups:
                group = GroupSpec(f"{RUN}/t/p0/{instance}", RUN, "t", env_id, instance, len(samples))
                store.create_group(group)
                for i, (sample_id, (reward, patch)) in enumerate(zip(group.sample_ids(), samples)):
                    traj = dataclasses.replace(
                        make_trajectory(RUN, group.group_id, i, reward=reward), env_id=env_id,
                        instance_id=instance, metrics={} if patch is None else {"patch": patch})
                    store.start_sample(sample_id, traj.rollout_id)
                    store.add(traj, sample_id=sample_id, task="t")
            await store.flush()

    asyncio.run(go())


def test_export_best_rewarded_patch_per_instance_and_all(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    fill(db)
    out = tmp_path / "preds.jsonl"
    result = CliRunner().invoke(app, ["runs", "export", RUN, str(out), "--format", "swebench",
                                      "--store", str(db)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["instance_id"]: r["model_patch"] for r in rows} == {SEMVER: "good", HUMANIZE: "try2"}
    assert {r["model_name_or_path"] for r in rows} == {f"gymfleet/{RUN}"}
    # the file is a predictions file gymfleet eval swebench (and swebench) reads
    assert set(load_predictions(out, [])) == {SEMVER, HUMANIZE}

    every = tmp_path / "all.jsonl"
    result = CliRunner().invoke(app, ["runs", "export", RUN, str(every), "--format", "swebench",
                                      "--all", "--store", str(db)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in every.read_text().splitlines()]
    assert sorted(r["model_patch"] for r in rows) == ["bad", "good", "try1", "try2"]
    assert len({r["model_name_or_path"] for r in rows}) == 4
