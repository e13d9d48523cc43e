"""`collect` says when nothing can run and why (every task with work left has weight 0) instead of
stalling silently at "in flight 0", and acknowledges each live weight edit. Real collect, scheduler,
store and config watcher; the policy is the scripted echo gateway."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import yaml
from rich.console import Console

from gymfleet.orchestrator.config import load_run_config
from gymfleet.run.collection import collect


def _config(tmp_path: Path, weight_b: float) -> dict:
    task = {"env_id": "tests.orchestrator.fakes:gymfleet-test/SlowEcho-v0", "env_kwargs": {"n_instances": 2},
            "group_size": 1, "passes": 1}
    return {"run_id": "stall", "store": str(tmp_path / "store.db"), "metrics_path": str(tmp_path / "metrics.jsonl"),
            "metrics_interval_s": 0.2, "policy": {"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"},
            "tasks": [{"name": "a", "weight": 1.0, **task}, {"name": "b", "weight": weight_b, **task}]}


async def test_collect_says_why_nothing_runs_and_acknowledges_weight_edits(tmp_path: Path) -> None:
    path = tmp_path / "stall.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path, 0.0)))
    out = io.StringIO()
    console = Console(file=out, width=300)
    run = asyncio.create_task(collect(load_run_config(path), config_path=path, console=console, live=False,
                                      progress_every_s=30))
    deadline = asyncio.get_running_loop().time() + 60
    while "nothing can run" not in out.getvalue() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    assert "nothing can run: the tasks with work left (b) have weight 0" in out.getvalue(), out.getvalue()
    path.write_text(yaml.safe_dump(_config(tmp_path, 2.0)))  # a live edit: b may run now
    outcome = await asyncio.wait_for(run, 60)
    assert outcome.status.value == "completed" and outcome.completed == 4
    assert "weights now a=1 b=2 (was a=1 b=0)" in out.getvalue(), out.getvalue()
