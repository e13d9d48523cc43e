"""The start-up parity check through a run's own gateway, against real float32 vLLM servers: it
passes, with vLLM's float32 logprobs within a few 1e-4 of the learner's. (A bfloat16 server is
refused: tests/vllm/test_serve_cli.py.)"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gymfleet.orchestrator.config import PolicyConfig
from gymfleet.orchestrator.policy import open_gateway
from gymfleet.core.records import SamplingParams

pytestmark = [pytest.mark.vllm, pytest.mark.model, pytest.mark.timeout(900)]


async def test_float32_replicas_pass(vllm_pair: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    sampling = SamplingParams(temperature=0.7, top_p=0.9)  # processed logprobs: after temperature and top-p
    engines = [{"kind": "vllm", "base_url": s.base_url, "model": s.served_model_name} for s in vllm_pair]
    caplog.set_level(logging.INFO, logger="gymfleet.orchestrator.parity")
    async with open_gateway(PolicyConfig(engines=engines), "parity", sampling=sampling) as gateway:
        assert gateway.policy_version == 0
    lines = [r.getMessage() for r in caplog.records if "parity check" in r.getMessage()]
    assert len(lines) == 2, lines
    n_tokens = [int(line.split(": ")[2].split()[0]) for line in lines]  # up to 32: EOS may come first
    maxima = [float(line.split(" max ")[1].split()[0]) for line in lines]
    assert min(n_tokens) >= 8 and max(maxima) <= 1e-3, lines
