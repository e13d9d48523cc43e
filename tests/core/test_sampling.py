"""The shared sampling-distribution logprobs (engine and learner compute the same quantity)."""

from __future__ import annotations

import math

import torch

from gymfleet.core.sampling import nucleus_logits, sample_token, token_logprobs, turn_seed


def test_temperature_scales_logits_before_softmax() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    got = token_logprobs(logits, torch.tensor([1]), temperature=0.5)
    expected = torch.log_softmax(logits / 0.5, dim=-1)[0, 1]
    assert torch.allclose(got, expected)


def test_greedy_reports_temperature_one_logprob_of_argmax() -> None:
    logits = torch.tensor([0.1, 3.0, -1.0])
    token, logprob = sample_token(logits, 0.0, 0.5, None)
    assert token == 1
    assert math.isclose(logprob, float(torch.log_softmax(logits, -1)[1]), rel_tol=1e-6)


def test_logprobs_are_after_nucleus_truncation() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    masked = nucleus_logits(logits, 0.75)
    assert torch.isinf(masked[2:]).all() and torch.isfinite(masked[:2]).all()
    got = token_logprobs(logits, torch.tensor(1), temperature=1.0, top_p=0.75)
    assert math.isclose(float(got), math.log(0.3 / 0.8), rel_tol=1e-5)


def test_sampled_token_logprob_matches_learner_function_and_seed_reproduces() -> None:
    logits = torch.randn(50, generator=torch.Generator().manual_seed(0))
    draws = [sample_token(logits, 0.7, 0.9, torch.Generator().manual_seed(5)) for _ in range(2)]
    assert draws[0] == draws[1]
    token, logprob = draws[0]
    assert math.isclose(logprob, float(token_logprobs(logits, torch.tensor(token), 0.7, 0.9)), rel_tol=1e-6)


def test_token_logprobs_handles_sequences_and_gradients() -> None:
    logits = torch.randn(2, 5, 11, requires_grad=True)
    ids = torch.randint(0, 11, (2, 5))
    out = token_logprobs(logits, ids, 1.0)
    assert out.shape == (2, 5)
    out.sum().backward()
    assert logits.grad is not None


def test_turn_seed_differs_by_turn_rollout_and_base_and_is_stable() -> None:
    seeds = {(b, r, t): turn_seed(b, r, t) for b in (0, 1) for r in ("run/g/0/a1", "run/g/0/a2") for t in range(3)}
    assert len(set(seeds.values())) == len(seeds)  # every (base, rollout, turn) gets its own seed
    assert all(0 <= s < 2**63 for s in seeds.values())  # vLLM's int64 seed field; torch.Generator
    assert turn_seed(0, "run/g/0/a1", 1) == seeds[(0, "run/g/0/a1", 1)]  # a pure function
    # a known value: the derivation must not change silently (it would change every run's samples)
    assert turn_seed(0, "r", 0) == 3552100087732094007
