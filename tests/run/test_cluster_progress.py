"""`train --cluster` prints the plain progress line of a one-machine run every interval, read from
the store, the bucket and the learner's log (the shards' own counters live in their Ray actors).
Real store, bucket and report folder; no Ray: the ticker the cluster placement starts, alone."""

from __future__ import annotations

import asyncio
import io
import re
import time
from pathlib import Path

from rich.console import Console

from gymfleet.orchestrator.store import GroupSpec, TrajectoryStore
from gymfleet.run.cluster import progress_lines
from gymfleet.run.config import load_train_config
from gymfleet.trainer.step_log import STEPS_FILE, StepRow, write_row
from tests.e2e.train_helpers import tiny_train_config
from tests.orchestrator.store.conftest import make_trajectory

LINE = re.compile(r"^\[prog \d\d:\d\d\] rollouts (\d+) done \(ok=(\d+)\) · in flight (\d+) · reward ([\d.]+) "
                  r"· policy v(\d+) · learner step (\S+)$")


async def _fill(url: str) -> None:
    async with await TrajectoryStore.open(url) as store:
        await store.start_run("prog", {})
        done = GroupSpec("prog/g0", "prog", "echo", "gymfleet-test/Echo-v0", "i0", 2)
        await store.create_group(done)
        for i, reward in enumerate((1.0, 0.0)):
            await store.add(make_trajectory("prog", done.group_id, i, reward=reward), task="echo")
        running = GroupSpec("prog/g1", "prog", "echo", "gymfleet-test/Echo-v0", "i1", 2)
        await store.create_group(running)
        await store.start_sample(running.sample_ids()[0], f"{running.sample_ids()[0]}/a1")
        await store.flush()


async def test_the_cluster_prints_the_local_runs_progress_line_every_interval(tmp_path: Path) -> None:
    cfg = load_train_config(tiny_train_config(tmp_path, "prog"))
    await _fill(cfg.run.store)
    (tmp_path / "report").mkdir()
    row = StepRow(step=4, loss=0.0, masked_fraction=0.0, mean_ratio=1.0, kl=0.0, n_tokens=1, n_groups=1,
                  mean_reward=0.5, t=time.time())
    with (tmp_path / "report" / STEPS_FILE).open("w") as log:
        write_row(log, row)
    out = io.StringIO()
    ticker = asyncio.create_task(progress_lines(cfg, Console(file=out, width=200), time.monotonic(), 0.2))
    while out.getvalue().count("\n") < 2 and not ticker.done():
        await asyncio.sleep(0.05)
    ticker.cancel()
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2, out.getvalue()
    match = LINE.match(lines[0])
    assert match, lines[0]
    assert match.groups() == ("2", "2", "1", "0.500", "0", "4")
