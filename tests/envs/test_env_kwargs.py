"""Every registered env's arguments are a strict model: a typo under ``env_kwargs``, at any depth, is
refused in one line naming the nearest key, before any env is made, and `gymfleet collect` with
such a typo exits 2 with that line."""

from __future__ import annotations

import types
import typing
from pathlib import Path

import gymnasium
import pytest
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.core.strict import StrictModel
from gymfleet.envs.registry import env_class, list_envs
from gymfleet.orchestrator.config import TaskConfig
from gymfleet.orchestrator.envfactory import check_env_kwargs
from gymfleet.core.errors import ConfigError

BUILTIN = sorted({env_class(e).__name__: e for e in list_envs("gymfleet")}.values())


def _typo(key: str) -> str:
    middle = len(key) // 2
    return key[:middle] + "q" + key[middle:]


def _models(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``X``, ``X | None``, ``list[X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        return [m for arg in typing.get_args(annotation) for m in _models(arg)]
    return []


def _nested(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], type[BaseModel]]]:
    """Every (path, model) under ``model`` whose value is a plain nested mapping (not a list)."""
    found = [(prefix, model)]
    for name, info in model.model_fields.items():
        if typing.get_origin(info.annotation) in (list, tuple, dict):
            continue
        for sub in _models(info.annotation):
            found += _nested(sub, (*prefix, name))
    return found


def _refusal(env_id: str, kwargs: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as caught:
        check_env_kwargs(TaskConfig(env_id=env_id, name="t", env_kwargs=kwargs))
    return str(caught.value)


@pytest.mark.parametrize("env_id", BUILTIN)
def test_every_env_model_is_strict_at_every_depth(env_id: str) -> None:
    model = env_class(env_id).config_class
    assert model is not None, f"{env_id} has no config_class: its arguments go unchecked"
    for path, sub in _nested(model):
        assert issubclass(sub, StrictModel), f"{env_id}: env_kwargs.{'.'.join(path)} is {sub.__name__}, not strict"


@pytest.mark.parametrize("env_id", BUILTIN)
def test_a_typo_under_env_kwargs_is_refused_naming_the_nearest_key(env_id: str) -> None:
    model = env_class(env_id).config_class
    assert model is not None
    for path, sub in _nested(model):
        key = sorted(sub.model_fields)[0]
        kwargs: dict[str, object] = {_typo(key): 1}
        for name in reversed(path):
            kwargs = {name: kwargs}
        message = _refusal(env_id, kwargs)
        where = ".".join(("env_kwargs", *path))
        assert message == f"task t: {where}: unknown key {_typo(key)!r}: did you mean {key!r}?"


def test_registered_defaults_are_checked_with_the_task_s_arguments() -> None:
    """A MiniWoB id registers ``tasks`` for its env: the task's typo is the only complaint."""
    env_id = next(e for e in list_envs("gymfleet") if ".click-button-" in e)
    assert "tasks" in gymnasium.spec(env_id).kwargs
    assert _refusal(env_id, {"max_turn": 3}) == "task t: env_kwargs: unknown key 'max_turn': did you mean 'max_turns'?"
    check_env_kwargs(TaskConfig(env_id=env_id, env_kwargs={"max_turns": 3}))  # no error


def test_collect_with_a_typo_under_env_kwargs_exits_2_with_one_line(tmp_path: Path) -> None:
    config = {
        "run_id": "typo", "store": str(tmp_path / "store.db"), "metrics_path": str(tmp_path / "metrics.jsonl"),
        "policy": {"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"},
        "tasks": [{"name": "swe", "env_id": "gymfleet/SWE-v0", "env_kwargs": {"harness": {"eval_timeot_s": 5}}}],
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["collect", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert errors == ["error: task swe: env_kwargs.harness: unknown key 'eval_timeot_s': "
                      "did you mean 'eval_timeout_s'?"], result.stderr
    assert not (tmp_path / "store.db").exists()  # refused before the store was opened
