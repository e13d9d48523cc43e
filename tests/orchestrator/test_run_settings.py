"""The run owns its sampling distribution and each task its one turn limit: contradictions are
refused in one line (exit 2), the old per-task keys load with a one-line deprecation."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.core.errors import ConfigError
from gymfleet.core.quiet import one_line_deprecations
from gymfleet.orchestrator import ConfigDeprecationWarning, RunConfig, load_run_config
from gymfleet.run.config import load_shard_config, load_train_config

ROOT = Path(__file__).resolve().parents[2]
ENV = "gymfleet/Terminal-v0"


def _write(tmp_path: Path, **doc: object) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_run_sampling_reaches_every_task_and_the_learner(tmp_path: Path) -> None:
    path = _write(tmp_path, sampling={"temperature": 0.7, "top_p": 0.9},
                  tasks=[{"name": "a", "env_id": ENV}, {"name": "b", "env_id": ENV, "sampling": {"max_new_tokens": 5}}])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigDeprecationWarning)
        cfg = load_train_config(path)
    assert [(t.sampling.temperature, t.sampling.top_p) for t in cfg.run.tasks] == [(0.7, 0.9), (0.7, 0.9)]
    assert cfg.run.tasks[1].sampling.max_new_tokens == 5  # the rest of a task's sampling stays its own
    policy = cfg.rollout_policy()
    assert (policy.temperature, policy.top_p) == (0.7, 0.9)
    assert RunConfig.model_validate(cfg.run.model_dump()) == cfg.run  # a resolved config round-trips


def test_old_per_task_keys_load_with_one_deprecation_line(tmp_path: Path) -> None:
    path = _write(tmp_path, tasks=[{"name": "a", "env_id": ENV, "sampling": {"temperature": 0.5, "top_p": 0.8}},
                                   {"name": "b", "env_id": ENV, "sampling": {"temperature": 0.5}}])
    with pytest.warns(ConfigDeprecationWarning) as caught:
        cfg = load_run_config(path)
    assert (cfg.sampling.temperature, cfg.sampling.top_p) == (0.5, 0.8)
    assert {(t.sampling.temperature, t.sampling.top_p) for t in cfg.tasks} == {(0.5, 0.8)}
    message = str(caught[0].message)
    assert message == ("tasks[].sampling.temperature, tasks[].sampling.top_p is deprecated: set it once for the run, "
                       "as `sampling: {temperature: 0.5, top_p: 0.8}` at the top level")


@pytest.mark.parametrize(("doc", "needle"), [
    ({"sampling": {"temperature": 0.7}, "tasks": [{"env_id": ENV, "sampling": {"temperature": 0.5}}]},
     "tasks.0.sampling.temperature is 0.5 but sampling.temperature is 0.7: a run samples with one temperature "
     "(the learner computes logprobs under it); drop tasks.0.sampling.temperature"),
    ({"tasks": [{"name": "a", "env_id": ENV, "sampling": {"top_p": 0.9}},
                {"name": "b", "env_id": ENV, "sampling": {"top_p": 0.95}}]},
     "tasks.0.sampling.top_p is 0.9 but tasks.1.sampling.top_p is 0.95: a run samples with one top_p "
     "(the learner computes logprobs under it); set sampling.top_p once, at the top level"),
    ({"tasks": [{"env_id": ENV, "env_kwargs": {"max_turns": 5}}]},
     "tasks.0.env_kwargs.max_turns is 5 but tasks.0.max_turns is 30: a task has one turn limit, its max_turns; "
     "set tasks.0.max_turns: 5 and drop env_kwargs.max_turns"),
    ({"tasks": [{"env_id": ENV, "max_turns": 4, "env_kwargs": {"max_turns": 6}}]},
     "tasks.0.env_kwargs.max_turns is 6 but tasks.0.max_turns is 4"),
])
def test_contradictions_are_refused_never_overwritten(tmp_path: Path, doc: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_run_config(_write(tmp_path, **doc))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_an_equal_env_turn_limit_is_accepted(tmp_path: Path) -> None:
    cfg = load_run_config(_write(tmp_path, tasks=[{"env_id": ENV, "max_turns": 6, "env_kwargs": {"max_turns": 6}}]))
    assert cfg.tasks[0].max_turns == 6


def test_a_contradiction_exits_2_with_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, sampling={"temperature": 0.7}, tasks=[{"env_id": ENV, "sampling": {"temperature": 0.2}}])
    result = CliRunner().invoke(app, ["collect", str(path)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "drop tasks.0.sampling.temperature" in lines[0]


def test_a_deprecation_prints_as_one_line() -> None:
    one_line_deprecations()
    one_line_deprecations()  # idempotent: the hook is not stacked
    line = warnings.formatwarning(ConfigDeprecationWarning("x is deprecated: set y"), ConfigDeprecationWarning,
                                  "f.py", 1)
    assert line == "deprecated: x is deprecated: set y\n"
    other = warnings.formatwarning(FutureWarning("z"), FutureWarning, "f.py", 1)
    assert "f.py:1: FutureWarning: z" in other


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads_without_a_deprecation(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigDeprecationWarning)
        load_shard_config(path)
