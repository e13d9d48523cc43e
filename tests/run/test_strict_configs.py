"""Strict configs: a typo at any depth is an error naming the nearest valid key; the learner trains
the model the policy serves (a mismatch is refused); one staleness bound."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from gymfleet.core.strict import StrictModel
from gymfleet.core.errors import ConfigError
from gymfleet.run.config import DEFAULT_MAX_STALENESS, TrainConfig, load_train_config

TASK = {"name": "t", "env_id": "gymfleet/Terminal-v0"}


def _doc(**fields: Any) -> dict[str, Any]:
    return {"tasks": [dict(TASK)], "sampling": {"temperature": 0.7}, **fields}


def _load(tmp_path: Path, doc: dict[str, Any], overrides: list[str] | None = None) -> TrainConfig:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_train_config(path, overrides)


TYPOS = [
    # (override with a typo, the path named, the key suggested)
    ("max_in_flght=3", "", "max_in_flight"),
    ("learnr={}", "", "learner"),
    ("tasks.0.sampling.temprature=0.1", "tasks.0.sampling", "temperature"),
    ("tasks.0.max_turn=3", "tasks.0", "max_turns"),
    ("policy.engines=[{kind: transformers, max_batch_sise: 4}]", "policy.engines.0", "max_batch_size"),
    ("policy.engines=[{max_batch_sise: 4}]", "policy.engines.0", "max_batch_size"),
    ("policy.engines=[{kind: vllm, base_ur: 'http://h:8000', model: m}]", "policy.engines.0", "base_url"),
    ("policy.router={request_timeout: 5}", "policy.router", "request_timeout_s"),
    ("policy.model={name_or_pth: x}", "policy.model", "name_or_path"),
    ("policy.adaptr=x", "policy", "adapter"),
    ("auto_mix.enabeld=true", "auto_mix", "enabled"),
    ("shutdown.deadline=3", "shutdown", "deadline_s"),
    ("learner.lora_rnk=4", "learner", "lora_rank"),
    ("budget.max_step=4", "budget", "max_steps"),
]


@pytest.mark.parametrize(("override", "where", "nearest"), TYPOS, ids=[t[0].split("=")[0] for t in TYPOS])
def test_a_typo_at_any_depth_names_the_nearest_key(tmp_path: Path, override: str, where: str, nearest: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, _doc(), [override])
    message = str(info.value)
    assert f"did you mean {nearest!r}" in message, message
    assert f"{where}" in message and "\n" not in message


def test_an_unknown_engine_kind_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'transformers', 'vllm'"):
        _load(tmp_path, _doc(), ["policy.engines=[{kind: tgi}]"])


def _models(cls: type[BaseModel], seen: set[type[BaseModel]]) -> set[type[BaseModel]]:
    if cls in seen:
        return seen
    seen.add(cls)
    for field in cls.model_fields.values():
        stack = [field.annotation]
        while stack:
            tp = stack.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                _models(tp, seen)
            stack.extend(typing.get_args(tp))
    return seen


def test_every_model_of_the_config_tree_is_strict() -> None:
    models = _models(TrainConfig, set())
    names = {m.__name__ for m in models}
    assert {"RunConfig", "TaskConfig", "SamplingParams", "PolicyConfig", "TransformersEngineConfig",
            "VLLMEngineConfig", "RouterConfig", "ModelSpec", "LearnerConfig", "BudgetConfig"} <= names
    assert [m.__name__ for m in models if not issubclass(m, StrictModel)] == []


def test_the_learner_trains_the_model_the_policy_serves(tmp_path: Path) -> None:
    cfg = _load(tmp_path, _doc(policy={"model": "org/model"}))
    assert cfg.rollout_policy().model.name_or_path == "org/model"
    assert cfg.worker_args().policy == cfg.rollout_policy()
    assert all(e.source.name_or_path == "org/model" for e in cfg.run.policy.engines)
    own_dtype = _load(tmp_path, _doc(policy={"model": "org/model"}, learner={"dtype": "bfloat16"}))
    assert own_dtype.learner.dtype == "bfloat16" and own_dtype.run.policy.parity.dtype == "bfloat16"


@pytest.mark.parametrize(("doc", "needle"), [
    (_doc(policy={"model": "org/served"}, learner={"model": "org/other"}),
     r"learner.model is not a learner setting: the run owns it \(policy.model"),
    (_doc(learner={"temperature": 0.5}), r"learner.temperature .* \(sampling.temperature\)"),
    (_doc(learner={"top_p": 0.5}), r"learner.top_p .* \(sampling.top_p\)"),
    (_doc(policy={"model": "org/a", "engines": [{"kind": "transformers", "source": "org/b"}]}),
     "engines.0.source is org/b but policy.model is org/a"),
])
def test_a_model_mismatch_is_refused(tmp_path: Path, doc: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        _load(tmp_path, doc)


def test_one_staleness_bound(tmp_path: Path) -> None:
    assert _load(tmp_path, _doc(max_staleness=2)).rollout_policy().max_staleness == 2
    default = _load(tmp_path, _doc())
    assert default.run.max_staleness == default.rollout_policy().max_staleness == DEFAULT_MAX_STALENESS
    with pytest.raises(ConfigError, match="learner.max_staleness is not a learner setting: the run owns it "
                                          r"\(the top-level max_staleness\)"):
        _load(tmp_path, _doc(max_staleness=2, learner={"max_staleness": 2}))
