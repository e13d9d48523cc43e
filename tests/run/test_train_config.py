"""TrainConfig loading, the service filter of the task mix, and the report writer."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from gymfleet.core.errors import ConfigError
from gymfleet.run.compose import runnable_tasks
from gymfleet.orchestrator import RunConfig, TaskConfig
from gymfleet.run.config import TrainConfig, load_train_config
from gymfleet.run.records import AdapterLoad, GenerationTimeline
from gymfleet.run.report import build_report, write_report

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _task(name: str, env_id: str = "gymfleet/Terminal-v0", **kw) -> dict:
    return {"name": name, "env_id": env_id, **kw}


def test_defaults_learner_sampling_and_staleness_come_from_the_run(tmp_path: Path) -> None:
    cfg = load_train_config(_write(tmp_path, {"tasks": [_task("a")], "max_staleness": 3,
                                              "sampling": {"temperature": 0.7, "top_p": 0.9}}),
                            ["mode=sync", "budget.max_steps=5"])
    assert cfg.run.run_id == "t" and cfg.mode == "sync" and cfg.budget.max_steps == 5
    policy = cfg.rollout_policy()
    assert (policy.temperature, policy.top_p, policy.max_staleness) == (0.7, 0.9, 3)
    assert cfg.run.max_staleness == 3 and cfg.run.tasks[0].passes is None
    assert cfg.bucket == "runs/t/bucket" and cfg.report_dir == "runs/t/report"


def test_defaults_are_resolved_into_new_records_and_the_given_ones_are_left_alone() -> None:
    run = RunConfig(run_id="r", tasks=[TaskConfig(name="a", env_id="gymfleet/Terminal-v0")])
    before = run.model_dump()
    cfg = TrainConfig(run=run, learner={"dtype": "bfloat16", "lr_schedule": "cosine"},
                      heldout={"instances": {"a": ["x"]}}, budget={"max_steps": 7})
    assert run.model_dump() == before  # nothing the caller handed in was rewritten
    assert (cfg.run.max_staleness, cfg.run.policy.parity.dtype, cfg.learner.lr_decay_steps) == (4, "bfloat16", 7)
    assert cfg.run.tasks[0].exclude_instances == ["x"] and cfg.bucket == "runs/r/bucket"
    assert cfg.learner_threads and cfg.run.policy.engines[0].n_threads == cfg.engine_threads
    assert cfg.run.shutdown.mode == "abort"  # the learner has stopped when the run does
    assert TrainConfig.model_validate(cfg.model_dump()) == cfg  # resolving a resolved config changes nothing


def test_the_embedded_default_config_loads() -> None:
    cfg = load_train_config(ROOT / "configs" / "train-default.yaml")
    assert {t.name for t in cfg.run.tasks} == {"miniwob", "terminal"}
    assert cfg.warmstart.enabled and cfg.heldout.enabled


@pytest.mark.parametrize(("doc", "overrides", "needle"), [
    ({"tasks": [_task("a"), _task("b", sampling={"temperature": 1.0})], "sampling": {"temperature": 0.7}}, [],
     r"tasks.1.sampling.temperature is 1.0 but sampling.temperature is 0.7: .* drop tasks.1.sampling.temperature"),
    ({"tasks": [_task("a")], "budget": {"max_steps": None}}, [], "budget.max_steps or budget.max_wall_s"),
    ({"tasks": [_task("a")], "policy": {"parity": {"dtype": "float32"}}, "learner": {"dtype": "bfloat16"}}, [],
     "policy.parity.dtype is float32 but learner.dtype is bfloat16: .* drop policy.parity.dtype"),
    ({"tasks": [_task("a")], "shutdown": {"mode": "finish"}}, [], "shutdown.mode finish: .* drop shutdown.mode"),
    ({"tasks": [_task("a")], "learner": {"lr_schedule": "cosine"}, "budget": {"max_steps": None, "max_wall_s": 9}},
     [], "decays over learner.lr_decay_steps: set it, or budget.max_steps"),
    ({"tasks": [_task("a")], "mode": "lockstep"}, [], "mode"),
    ({"tasks": 3}, [], "tasks: Input should be a valid list"),
    ({"tasks": [_task("a")], "sampling": 5}, [], "sampling: Input should be a valid dictionary"),
    ({"tasks": [_task("a")]}, ["learner"], "KEY.PATH=VALUE"),
    ({"tasks": [_task("a")], "learner": {"lora_rank": 0}}, [], "learner.lora_rank"),
    ({"tasks": [_task("a")], "learner": {"adapter": "full"}}, [], "learner.adapter"),
    ({"tasks": [_task("a")], "learner": {"adapter": "none"},
      "policy": {"engines": [{"kind": "vllm", "launch": True}]}}, [], r"policy.engines\[0\].server.full_weights: true"),
])
def test_bad_configs_say_what_to_fix(tmp_path: Path, doc: dict, overrides: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_train_config(_write(tmp_path, doc), overrides)


async def test_tasks_whose_service_is_missing_are_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gymfleet.envs.resources import EnvResources

    monkeypatch.setenv("GYMFLEET_CHROMIUM", str(tmp_path / "no-chromium"))
    monkeypatch.setenv("PATH", str(tmp_path) + ":" + os.path.dirname(shutil.which("bwrap") or "/usr/bin/bwrap"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-docker.sock'}")
    cfg = load_train_config(_write(tmp_path, {"tasks": [
        _task("term", env_kwargs={"sandbox": "local"}), _task("dterm", env_kwargs={"sandbox": "docker"}),
        _task("web", "gymfleet/miniwob.click-test-2-v0"), _task("swe", "gymfleet/SWE-v0"),
    ]}))
    async with EnvResources.open(cfg.run.resources, run_id=cfg.run.run_id) as resources:
        run, left_out = runnable_tasks(cfg.run, resources)
        assert [t.name for t in run.tasks] == ["term"]
        assert set(left_out) == {"dterm", "web", "swe"}
        assert "Docker" in left_out["swe"] and "Chromium" in left_out["web"]
        only_web = cfg.run.model_copy(update={"tasks": [cfg.run.tasks[2]]})
        with pytest.raises(ValueError, match="no task"):
            runnable_tasks(only_web, resources)


def test_report_json_and_pngs(tmp_path: Path) -> None:
    t0 = time.time()
    steps = [{"event": "step", "t": t0 + 10 * i, "step": i, "loss": 0.1, "masked_fraction": 0.01, "mean_ratio": 1.0,
              "kl": 0.001, "n_tokens": 100, "n_groups": 2, "mean_reward": 0.5, "idle_s": 2.0, "duration_s": 8.0,
              "published_version": i, "reward_by_task": {"a": 0.1 * i, "b": 0.5}, "version": i,
              "filter": {"staleness": [0, 1, 1]}} for i in (1, 2, 3)]
    (tmp_path / "learner.jsonl").write_text("\n".join(json.dumps(s) for s in steps) + "\n")
    timeline = GenerationTimeline(started_at=t0 - 1, wall_s=40.0, generation_idle_s=4.0,
                                  loads=[AdapterLoad(t0 + 11, 1, 0.5)], left_out={"swe": "no Docker"})
    report = build_report(tmp_path, "async", timeline, "r")
    assert report.n_steps == 3 and report.staleness_histogram == {"0": 3, "1": 6}
    assert report.learner_idle_fraction == pytest.approx(6 / 40) and report.tokens_masked == pytest.approx(3.0)
    path = write_report(tmp_path, report)
    assert json.loads(path.read_text())["tasks_left_out"] == {"swe": "no Docker"}
    for png in ("reward.png", "learner.png", "staleness.png", "idle.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_report_counts_zero_variance_groups_per_step_and_in_total(tmp_path: Path) -> None:
    t0 = time.time()
    base = {"event": "step", "loss": 0.1, "masked_fraction": 0.0, "mean_ratio": 1.0, "kl": 0.0, "n_tokens": 10,
            "n_groups": 2, "mean_reward": 0.5, "idle_s": 0.0, "duration_s": 1.0, "published_version": None,
            "reward_by_task": {}, "version": 0, "filter": {"staleness": []}}
    steps = [base | {"t": t0 + 1, "step": 1, "n_zero_variance_groups": 3, "n_extra_claims": 2, "n_groups_short": 0},
             base | {"t": t0 + 2, "step": 2, "n_zero_variance_groups": 5, "n_extra_claims": 4, "n_groups_short": 1},
             base | {"t": t0 + 3, "step": 3}]  # a step with nothing to refill (the fields' defaults)
    (tmp_path / "learner.jsonl").write_text("\n".join(json.dumps(s) for s in steps) + "\n")
    report = build_report(tmp_path, "async", GenerationTimeline(started_at=t0, wall_s=5.0), "r")
    assert report.zero_variance_groups == 8 and report.refill_extra_claims == 6 and report.steps_short == 1
    assert [s.n_zero_variance_groups for s in report.steps] == [3, 5, 0]
