"""One ClaimedGroup, one model spec, one staleness definition, strict sampling settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gymfleet.core.models import ModelSpec
from gymfleet.core.records import ClaimedGroup, SamplingParams, staleness


def test_store_and_learner_share_one_claimed_group() -> None:
    from gymfleet.orchestrator.store import ClaimedGroup as StoreGroup
    from gymfleet.trainer.signal import ClaimedGroup as LearnerGroup

    assert StoreGroup is ClaimedGroup and LearnerGroup is ClaimedGroup


def test_one_model_spec_for_policy_engines_and_learner() -> None:
    from gymfleet.orchestrator.config import PolicyConfig
    from gymfleet.orchestrator.engines.transformers_engine import TransformersEngineConfig
    from gymfleet.trainer.rollout_policy import RolloutPolicy

    assert PolicyConfig.model_fields["model"].annotation is ModelSpec
    assert TransformersEngineConfig.model_fields["source"].annotation is ModelSpec
    assert RolloutPolicy.model_fields["model"].annotation is ModelSpec  # the learner's base model


def test_model_spec_reads_a_plain_name() -> None:
    assert ModelSpec.model_validate("org/model") == ModelSpec(name_or_path="org/model")
    assert ModelSpec.model_validate(None).is_embedded and ModelSpec(name_or_path="").is_embedded
    assert ModelSpec(name_or_path="a", dtype="bfloat16").same_weights(ModelSpec(name_or_path="a"))
    assert not ModelSpec(name_or_path="a").same_weights(ModelSpec())


def test_sampling_params_refuse_unknown_keys() -> None:
    with pytest.raises(ValidationError, match="temprature"):
        SamplingParams.model_validate({"temprature": 0.1})


def test_staleness_is_versions_behind() -> None:
    assert staleness(5, 3) == 2 and staleness(3, 3) == 0
