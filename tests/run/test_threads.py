"""torch threads are set on purpose per process: the learner and the in-process engines split the
usable CPUs unless configured, and the report says what the learner process ran with."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import yaml

from gymfleet.orchestrator.engines.config import TransformersEngineConfig
from gymfleet.run.config import load_train_config
from gymfleet.run.records import GenerationTimeline
from gymfleet.run.report import build_report
from gymfleet.run.threads import ThreadPlan, learner_environment, split_threads, usable_cpus

TASK = {"name": "a", "env_id": "gymfleet/Terminal-v0"}


def _load(tmp_path: Path, doc: dict, overrides: list[str] | None = None):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"tasks": [TASK], **doc}))
    return load_train_config(path, overrides)


def test_unset_threads_split_the_cpus_between_learner_and_engines() -> None:
    assert split_threads(2) == ThreadPlan(learner=1, engine=1)
    assert split_threads(16) == ThreadPlan(learner=8, engine=8)
    assert split_threads(1) == ThreadPlan(learner=1, engine=1)
    assert split_threads(16, learner=4) == ThreadPlan(learner=4, engine=12)
    assert split_threads(16, engine=2) == ThreadPlan(learner=8, engine=2)


def test_in_sync_mode_the_learner_and_the_engines_each_get_every_cpu() -> None:
    # they take turns (generate, then train), so a split would leave half the machine idle in each phase
    assert split_threads(2, mode="sync") == ThreadPlan(learner=2, engine=2)
    assert split_threads(16, learner=4, mode="sync") == ThreadPlan(learner=4, engine=16)


def test_a_sync_run_config_gives_both_every_cpu(tmp_path: Path) -> None:
    cfg = _load(tmp_path, {"mode": "sync"})
    (engine,) = cfg.run.policy.engines
    assert cfg.learner_threads == usable_cpus() and engine.n_threads == usable_cpus()
    cfg = _load(tmp_path, {"mode": "async"})
    assert (cfg.learner_threads, cfg.run.policy.engines[0].n_threads) == tuple(vars(split_threads(usable_cpus())).values())


def test_the_default_embedded_engine_and_the_learner_get_threads_from_the_config(tmp_path: Path) -> None:
    cfg = _load(tmp_path, {})
    (engine,) = cfg.run.policy.engines
    assert isinstance(engine, TransformersEngineConfig) and engine.name == "local-0"
    assert cfg.learner_threads is not None and engine.n_threads is not None
    assert (cfg.learner_threads, engine.n_threads) == tuple(vars(split_threads(usable_cpus())).values())

    cfg = _load(tmp_path, {"learner_threads": 1, "engine_threads": 3,
                           "policy": {"engines": [{"kind": "transformers"}, {"kind": "transformers", "n_threads": 2}]}})
    assert cfg.learner_threads == 1 and [e.n_threads for e in cfg.run.policy.engines] == [3, 2]


def test_an_import_gateway_gets_no_engine_but_the_learner_still_its_threads(tmp_path: Path) -> None:
    cfg = _load(tmp_path, {"policy": {"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"}})
    assert cfg.run.policy.engines == [] and cfg.learner_threads is not None


def test_the_report_holds_the_learner_processes_torch_threads(tmp_path: Path) -> None:
    t0 = time.time()
    (tmp_path / "learner.jsonl").write_text(json.dumps({"event": "start", "t": t0 + 1, "torch_threads": 3}) + "\n")
    report = build_report(tmp_path, "async", GenerationTimeline(started_at=t0, wall_s=2.0), "r")
    assert report.torch_threads.learner == 3


def test_an_async_learner_starts_with_openmps_passive_wait_unless_the_user_chose(tmp_path: Path) -> None:
    assert learner_environment("async", {}) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert learner_environment("async", {"OMP_WAIT_POLICY": "ACTIVE"}) == {}
    assert learner_environment("sync", {}) == {}
    if "OMP_WAIT_POLICY" not in os.environ:
        assert _load(tmp_path, {"mode": "async"}).worker_args().environment == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert _load(tmp_path, {"mode": "sync"}).worker_args().environment == {}
