"""One code path builds a run: ``open_run`` (gymfleet/run/compose.py) is the only place that opens
env resources for a run, builds a Scheduler and (through it) starts a run in the store; ``collect``,
``train`` (its GRPO stage here and each shard of ``train --cluster``), the held-out evaluation and
the demonstrations all go through it."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from gymfleet.orchestrator.store import TrajectoryStore
from gymfleet.run.config import load_train_config
from gymfleet.run.demonstrations import record_demonstrations
from tests.e2e.train_helpers import tiny_train_config

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ("gymfleet", "envs", "orchestrator", "trainer")
COMPOSE = Path("gymfleet/run/compose.py")
SCHEDULER = Path("orchestrator/scheduler.py")


def _calls(name: str) -> dict[Path, list[ast.Call]]:
    """Every call of ``X.name(...)`` or ``name(...)`` in the package, by file (relative to the root)."""
    found: dict[Path, list[ast.Call]] = {}
    for folder in PACKAGE:
        for path in (ROOT / folder).rglob("*.py"):
            if "tasks" in path.relative_to(ROOT).parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and (
                        (isinstance(node.func, ast.Attribute) and node.func.attr == name)
                        or (isinstance(node.func, ast.Name) and node.func.id == name)):
                    found.setdefault(path.relative_to(ROOT), []).append(node)
    return found


def _private(call: ast.Call) -> bool:
    """``EnvResources.open(ResourcesConfig.private(), ...)``: an env made alone (``gymnasium.make``
    outside any run) owns resources of its own, shared with nothing."""
    first = call.args[0] if call.args else None
    return isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute) and first.func.attr == "private"


def test_only_open_run_opens_a_runs_env_resources() -> None:
    opened = {path for path, calls in _calls("open").items() for call in calls
              if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
              and call.func.value.id == "EnvResources" and not _private(call)}
    assert opened == {COMPOSE}


def test_only_open_run_builds_a_scheduler_and_only_the_scheduler_starts_a_store_run() -> None:
    assert set(_calls("Scheduler")) == {COMPOSE}
    assert set(_calls("start_run")) == {SCHEDULER, Path("orchestrator/store/store.py")}  # the store's own method


@pytest.mark.model
async def test_demonstrations_are_a_run_of_open_run_and_its_scheduler(tmp_path: Path, smollm_tokenizer: Any) -> None:
    """The demonstrations run is started by the Scheduler (its config stored with the run, its
    events in its own metrics file) and resumes like any run: recorded again, nothing is replayed."""
    cfg = load_train_config(tiny_train_config(tmp_path, "one"), ["tasks.0.passes=1"])
    first = await record_demonstrations(cfg.run, smollm_tokenizer, episodes_per_instance=1, max_instances_per_task=2)
    assert (first.run_id, first.by_status, first.n_solved) == ("one.demos", {"ok": 2}, 2)
    events = [json.loads(line)["event"] for line in (tmp_path / "metrics.demos.jsonl").read_text().splitlines()]
    assert events[0] == "start" and events[-1] == "end"
    assert not (tmp_path / "metrics.jsonl").exists()  # the training run's own metrics are untouched
    async with await TrajectoryStore.open(cfg.run.store) as store:
        summary = await store.run_summary("one.demos")
        assert summary.status == "completed"
    again = await record_demonstrations(cfg.run, smollm_tokenizer, episodes_per_instance=1, max_instances_per_task=2)
    assert (again.by_status, again.n_solved) == ({}, 2)
