"""The GRPO losses against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from gymfleet.trainer.loss import LossConfig, group_advantages, policy_loss

CFG = LossConfig(eps_low=0.2, eps_high=0.28)


def test_group_advantages_by_hand() -> None:
    adv = group_advantages(torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]))
    assert adv[0].tolist() == pytest.approx([1.0, -1.0], abs=1e-5)
    assert adv[1].tolist() == [0.0, 0.0]  # zero-variance group: no signal
    assert adv[2].tolist() == [0.0, 0.0]
    one = group_advantages(torch.tensor([3.0, 1.0, 2.0, 2.0]))
    std = math.sqrt(((1.0) ** 2 + 1.0 + 0 + 0) / 4)  # population std of (3,1,2,2) around 2
    assert one.tolist() == pytest.approx([1 / (std + 1e-6), -1 / (std + 1e-6), 0.0, 0.0], rel=1e-5)


def _batch(ratios: list[float], adv: float = 1.0):
    """One sequence whose generated tokens have the given ratios; behaviour logp = log 0.5."""
    behaviour = torch.full((1, len(ratios)), math.log(0.5))
    logp = (behaviour + torch.log(torch.tensor([ratios]))).requires_grad_(True)
    return logp, behaviour, torch.tensor([adv]), torch.ones(1, len(ratios))


def test_dsis_masks_both_edges_without_gradient() -> None:
    # ratios: inside, at/below the low edge, at/above the high edge, inside.
    logp, behaviour, adv, mask = _batch([1.0, 0.8, 1.28, 1.1])
    out = policy_loss(logp, behaviour, adv, mask, objective="dsis", config=CFG)
    # kept: 1.0 and 1.1; loss = -(1.0 + 1.1) * 1 / 4 tokens
    assert out.loss.item() == pytest.approx(-(1.0 + 1.1) / 4, rel=1e-5)
    out.loss.backward()
    grad = logp.grad[0].tolist()
    # d/dlogp of -(ratio * A)/n = -ratio*A/n for kept tokens; exactly 0 for masked ones.
    assert grad == pytest.approx([-1.0 / 4, 0.0, 0.0, -1.1 / 4], rel=1e-5)
    assert out.masked_fraction == pytest.approx(0.5)
    assert out.n_tokens == 4


def test_ppo_clip_clips_instead_of_masking() -> None:
    logp, behaviour, adv, mask = _batch([1.0, 1.5])
    out = policy_loss(logp, behaviour, adv, mask, objective="ppo_clip", config=CFG)
    assert out.loss.item() == pytest.approx(-(1.0 + 1.28) / 2, rel=1e-5)
    out.loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-0.5, 0.0], abs=1e-6)


def test_no_correction_gradient_is_advantage_times_grad_logp() -> None:
    logp, behaviour, adv, mask = _batch([3.0, 0.1], adv=-2.0)
    out = policy_loss(logp, behaviour, adv, mask, objective="none")
    out.loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([1.0, 1.0])  # -(-2)/2 each


def test_zero_advantage_group_gives_zero_loss_and_gradient() -> None:
    logp, behaviour, _, mask = _batch([1.0, 1.1, 0.9])
    adv = group_advantages(torch.tensor([1.0]))  # one-sample group: advantage 0
    out = policy_loss(logp, behaviour, adv, mask)
    out.loss.backward()
    assert out.loss.item() == 0.0 and torch.count_nonzero(logp.grad) == 0


def test_padding_and_env_tokens_do_not_count() -> None:
    behaviour = torch.full((2, 4), math.log(0.5))
    logp = behaviour.clone()
    logp[0, 3] = 5.0  # a padding position with an absurd logprob
    logp[1, 0] = -9.0  # a prompt token
    logp.requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 0, 0]])
    out = policy_loss(logp, behaviour, torch.tensor([1.0, -1.0]), mask)
    # ratios are 1 on every generated token: loss = -(3 * 1 - 1 * 1) / 4
    assert out.loss.item() == pytest.approx(-(3 - 1) / 4)
    assert out.masked_fraction == 0.0 and out.mean_ratio == pytest.approx(1.0)
    assert out.kl == pytest.approx(0.0, abs=1e-7)
    out.loss.backward()
    assert logp.grad[0, 3] == 0 and logp.grad[1, 0] == 0


def test_token_level_normalisation_across_micro_batches() -> None:
    logp, behaviour, adv, mask = _batch([1.0, 1.1, 0.9, 1.05])
    whole = policy_loss(logp, behaviour, adv, mask).loss
    half_a = policy_loss(logp[:, :2], behaviour[:, :2], adv, mask[:, :2], n_tokens_total=4).loss
    half_b = policy_loss(logp[:, 2:], behaviour[:, 2:], adv, mask[:, 2:], n_tokens_total=4).loss
    assert (half_a + half_b).item() == pytest.approx(whole.item(), rel=1e-6)


def test_kl_estimate_is_k3() -> None:
    logp, behaviour, adv, mask = _batch([2.0])
    out = policy_loss(logp, behaviour, adv, mask, config=LossConfig(eps_low=0.9, eps_high=5))
    assert out.kl == pytest.approx((2.0 - 1) - math.log(2.0), rel=1e-5)


def test_bad_input_errors_name_the_fix() -> None:
    logp, behaviour, adv, mask = _batch([1.0])
    with pytest.raises(KeyError, match="dsis"):
        policy_loss(logp, behaviour, adv, mask, objective="grpo")
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        policy_loss(logp, behaviour[:, :0], adv, mask)
    with pytest.raises(ValueError, match=r"\(B,\)"):
        policy_loss(logp, behaviour, torch.tensor([1.0, 2.0]), mask)
