"""The start-up parity check: figures, diagnosis of the likely cause, refuse or warn.

The bf16-vs-float32 case against a real vLLM server is in tests/orchestrator/test_vllm_real.py;
here the same drift comes from an in-process engine on a bfloat16 copy of the model.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from gymfleet.orchestrator.config import PolicyConfig
from gymfleet.orchestrator.engines.errors import ParityError
from gymfleet.orchestrator.engines.transformers_engine import TransformersEngine, TransformersEngineConfig
from gymfleet.core.errors import ConfigError
from gymfleet.orchestrator.parity import (
    PROBE_MESSAGES,
    LearnerScorer,
    ParityConfig,
    check_parity,
    compare,
)
from gymfleet.orchestrator.policy import open_gateway
from gymfleet.core.records import Generation, SamplingParams
from tests.orchestrator.fake_http import fake_replica

SAMPLING = SamplingParams(temperature=0.7, top_p=0.9)


class TableScorer:
    """A LogprobScorer answering from a table keyed by (temperature, top_p)."""

    def __init__(self, table: dict[tuple[float, float], list[float]]) -> None:
        self.table = table

    def score(self, token_ids: list[int], n_prompt: int, temperature: float, top_p: float) -> list[float]:
        return self.table[(temperature, top_p)]


def _generation(logprobs: list[float]) -> Generation:
    return Generation(list(range(10, 10 + len(logprobs))), logprobs, "length", replica="r")


def test_equal_logprobs_pass_with_their_figures() -> None:
    learner = [-0.5, -1.0, -2.0, -0.1]
    replica = [x + 1e-4 for x in learner]
    report = compare("r", [1, 2], _generation(replica), TableScorer({(0.7, 0.9): learner}), SAMPLING, 0.05)
    assert report.passed and report.likely_cause is None and report.n_tokens == 4
    assert report.max_abs_delta == pytest.approx(1e-4) and report.ratio_min == pytest.approx(math.exp(-1e-4))


@pytest.mark.parametrize(
    ("learner", "raw", "replica", "cause"),
    [
        ([-0.5, -1.0, -2.0], [-0.9, -1.6, -2.4], [-0.6, -0.8, -2.2], "dtype"),
        ([-0.5, -1.0, -2.0], [-0.9, -1.6, -2.4], [-0.9, -1.6, -2.41], "logprobs mode"),
        ([-0.5, -math.inf, -2.0], [-0.9, -7.0, -2.4], [-0.5, -3.0, -2.0], "sampling params"),
        ([-0.5, -1.0, -2.0], [-0.9, -1.6, -2.4], [-3.5, -0.1, -6.0], "model"),
    ],
)
def test_a_mismatch_names_its_likely_cause(learner: list[float], raw: list[float], replica: list[float], cause: str) -> None:
    scorer = TableScorer({(0.7, 0.9): learner, (1.0, 1.0): raw})
    report = compare("r", [1], _generation(replica), scorer, SAMPLING, 0.05)
    assert not report.passed and report.likely_cause.startswith(cause), report.likely_cause
    assert f"likely cause: {cause}" in report.summary()


class ShiftedEngine:
    """A replica whose logprobs are the learner's plus ``shift``."""

    def __init__(self, name: str, shift: float) -> None:
        self.name, self.shift = name, shift

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams, adapter: str | None = None,
                       routing_key: str | None = None) -> Generation:
        assert adapter is None and sampling.max_new_tokens == 4 and sampling.temperature == 0.7
        return _generation([-1.0 + self.shift] * 4)


async def test_refuses_naming_every_failing_replica_or_warns_by_config() -> None:
    scorer = TableScorer({(0.7, 0.9): [-1.0] * 4, (1.0, 1.0): [-1.3] * 4})
    replicas: list[Any] = [ShiftedEngine("good", 1e-5), ShiftedEngine("bad", 0.2)]
    with pytest.raises(ParityError, match="replica bad:.*max 2.00e-01.*likely cause: dtype") as info:
        await check_parity(replicas, [1, 2], scorer, SAMPLING, ParityConfig(probe_tokens=4))
    assert "replica good" not in str(info.value)
    reports = await check_parity(replicas, [1, 2], scorer, SAMPLING, ParityConfig(probe_tokens=4, on_mismatch="warn"))
    assert [r.passed for r in reports] == [True, False]


@pytest.mark.model
@pytest.mark.parametrize(("dtype", "passes"), [("float32", True), ("bfloat16", False)])
async def test_in_process_engine_in_bfloat16_is_refused_float32_passes(smollm_model: Any, smollm_tokenizer: Any,
                                                                       dtype: str, passes: bool) -> None:
    import torch

    served = copy.deepcopy(smollm_model).to(getattr(torch, dtype))
    prompt = smollm_tokenizer.apply_chat_template([{"role": m.role, "content": m.content} for m in PROBE_MESSAGES],
                                                  add_generation_prompt=True)["input_ids"]
    async with TransformersEngine(TransformersEngineConfig(name=dtype), served, smollm_tokenizer) as engine:
        reports = await check_parity([engine], list(prompt), LearnerScorer(smollm_model), SAMPLING,
                                     ParityConfig(on_mismatch="warn"))
    report = reports[0]
    assert report.passed is passes, report.summary()
    if passes:
        assert report.max_abs_delta < 1e-3
    else:
        assert report.likely_cause.startswith("dtype") and report.ratio_max - report.ratio_min > 0.05


@pytest.mark.model
async def test_a_run_over_a_mismatched_http_replica_does_not_start() -> None:
    with fake_replica("vllm") as url:  # canned logprobs, nothing like the model's
        policy = PolicyConfig(engines=[{"kind": "vllm", "base_url": url, "model": "m"}])
        with pytest.raises(ConfigError, match=r"policy.parity: .*replica http://127.0.0.1:\d+: 2 probe tokens"):
            async with open_gateway(policy, "r", sampling=SAMPLING):
                pass
        policy.parity.on_mismatch = "warn"
        async with open_gateway(policy, "r", sampling=SAMPLING) as gateway:
            assert gateway.policy_version == 0
