"""GRPO losses as pure tensor functions: group advantages and the policy objectives.

Shapes: B sequences, T tokens, G samples per group. Every objective takes the learner's
per-token logprobs ``logp`` (B, T), the behaviour policy's (rollout engine's) logprobs
``behaviour_logp`` (B, T), the per-sequence advantages (B,), and the loss mask (B, T) which is
1 on tokens the policy generated. Padding carries mask 0 and never contributes.

Objectives (pick by name from :data:`OBJECTIVES`):

* ``"dsis"``: direct double-sided importance sampling (GLM-5; docs/design.md, Learner). Per token
  ``ratio = exp(logp - behaviour_logp)``; ``keep = 1 - eps_low < ratio < 1 + eps_high``;
  ``loss = -sum(keep * ratio * A) / n_generated_tokens``. Tokens outside the band are masked,
  not clipped: they get no gradient at all. No old-policy forward pass.
* ``"ppo_clip"``: PPO's clipped surrogate (Schulman et al. 2017, eq. 7) against the rollout
  logprobs: ``-sum(min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)) / n``.
* ``"none"``: no off-policy correction (on-policy REINFORCE with group baseline):
  ``-sum(exp(logp - stopgrad(logp)) * A) / n``, whose gradient is ``A * grad(logp)``.

Normalisation is token-level (DAPO, Yu et al. 2025, sec. 3.3): the sum over every generated
token of the whole optimiser step divided by their count, so that a step split into
micro-batches gives the same gradient when each passes ``n_tokens_total``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

ADVANTAGE_EPS = 1e-6


def group_advantages(rewards: torch.Tensor, *, unbiased: bool = False, eps: float = ADVANTAGE_EPS) -> torch.Tensor:
    """Group-relative advantages ``A_i = (r_i - mean(r)) / (std(r) + eps)``.

    GRPO (Shao et al. 2024, DeepSeekMath, sec. 4.1.2). The learner uses the population standard
    deviation (``unbiased=False``), so a group of two samples with rewards (1, 0) gets (+1, -1)
    up to the epsilon. TRL's ``GRPOTrainer`` (``scale_rewards="group"``) uses the sample standard
    deviation and ``eps=1e-4``: ``unbiased=True, eps=1e-4`` gives its advantages exactly; for
    a group of G they are ``sqrt((G - 1) / G)`` times the learner's (0.87 at G=4). A group whose
    rewards are all equal gets zero advantages either way.

    Args:
        rewards: (N, G) rewards, one row per group; a 1-D (G,) tensor is one group.
        unbiased: divide the variance by G - 1 (sample std) instead of G.
        eps: added to the std.

    Returns:
        Advantages of the same shape and dtype float32.
    """
    r = rewards.to(torch.float32)
    squeeze = r.dim() == 1
    if squeeze:
        r = r.unsqueeze(0)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, unbiased=unbiased, keepdim=True)
    adv = (r - mean) / (std + eps)
    return adv.squeeze(0) if squeeze else adv


@dataclass(frozen=True)
class LossConfig:
    """Band of the importance ratio; tokens with ratio outside (1 - eps_low, 1 + eps_high) are
    masked (dsis) or clipped (ppo_clip)."""

    eps_low: float = 0.2
    eps_high: float = 0.28


@dataclass(frozen=True)
class LossOutput:
    """A loss and what a run report shows of it.

    Attributes:
        loss: scalar tensor to backpropagate.
        masked_fraction: share of generated tokens outside the ratio band (dsis: no gradient;
            ppo_clip: clipped). Float in [0, 1].
        mean_ratio: mean importance ratio over generated tokens.
        kl: estimate of KL(behaviour || learner) over generated tokens, the k3 estimator
            ``(r - 1) - log r`` (Schulman 2020, "Approximating KL divergence"), non-negative.
        n_tokens: generated tokens in this (micro-)batch.
    """

    loss: torch.Tensor
    masked_fraction: float
    mean_ratio: float
    kl: float
    n_tokens: int


Objective = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, LossConfig], torch.Tensor]


def _dsis(ratio: torch.Tensor, logp: torch.Tensor, adv: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    keep = ((ratio > 1 - cfg.eps_low) & (ratio < 1 + cfg.eps_high)).to(ratio.dtype).detach()
    return keep * ratio * adv


def _ppo_clip(ratio: torch.Tensor, logp: torch.Tensor, adv: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    clipped = torch.clamp(ratio, 1 - cfg.eps_low, 1 + cfg.eps_high)
    return torch.minimum(ratio * adv, clipped * adv)


def _none(ratio: torch.Tensor, logp: torch.Tensor, adv: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    return torch.exp(logp - logp.detach()) * adv


# name -> per-token surrogate objective (to be maximised), each (B, T) -> (B, T).
OBJECTIVES: dict[str, Objective] = {"dsis": _dsis, "ppo_clip": _ppo_clip, "none": _none}


def policy_loss(
    logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    objective: str = "dsis",
    config: LossConfig = LossConfig(),
    n_tokens_total: int | None = None,
) -> LossOutput:
    """The policy-gradient loss of one (micro-)batch.

    Args:
        logp: (B, T) learner logprobs of each token, with gradient.
        behaviour_logp: (B, T) logprobs the rollout engine recorded (no gradient).
        advantages: (B,) per-sequence advantage, broadcast over its tokens.
        loss_mask: (B, T) 1 on generated tokens, 0 on prompt, env tokens and padding.
        objective: a key of :data:`OBJECTIVES`.
        config: the ratio band.
        n_tokens_total: generated tokens in the whole optimiser step (token-level
            normalisation across micro-batches); defaults to this batch's count.

    Returns:
        :class:`LossOutput`.

    Raises:
        KeyError: unknown objective (the message lists the known ones).
        ValueError: shapes disagree.
    """
    if objective not in OBJECTIVES:
        raise KeyError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    if logp.shape != behaviour_logp.shape or logp.shape != loss_mask.shape:
        raise ValueError(
            f"logp {tuple(logp.shape)}, behaviour_logp {tuple(behaviour_logp.shape)} and "
            f"loss_mask {tuple(loss_mask.shape)} must all be (B, T)"
        )
    if advantages.shape != logp.shape[:1]:
        raise ValueError(f"advantages must be (B,) = {tuple(logp.shape[:1])}, got {tuple(advantages.shape)}")
    mask = loss_mask.to(logp.dtype)
    n_tokens = int(mask.sum().item())
    denom = float(max(n_tokens_total if n_tokens_total is not None else n_tokens, 1))
    log_ratio = (logp - behaviour_logp.detach()) * mask  # 0 on non-generated tokens: ratio 1 there
    ratio = torch.exp(log_ratio)
    surrogate = OBJECTIVES[objective](ratio, logp, advantages.to(logp.dtype)[:, None], config)
    loss = -(surrogate * mask).sum() / denom
    with torch.no_grad():
        outside = ((ratio <= 1 - config.eps_low) | (ratio >= 1 + config.eps_high)).to(logp.dtype)
        count = max(n_tokens, 1)
        masked_fraction = float((outside * mask).sum() / count)
        mean_ratio = float((ratio * mask).sum() / count)
        kl = float((((ratio - 1) - log_ratio) * mask).sum() / count)
    return LossOutput(loss, masked_fraction, mean_ratio, kl, n_tokens)


def sft_loss(logp: torch.Tensor, loss_mask: torch.Tensor, n_tokens_total: int | None = None) -> torch.Tensor:
    """Supervised cross-entropy (behaviour cloning) on the loss-mask tokens of demonstrations.

    The mean negative log-likelihood per target token, in nats: ``-sum(mask * logp) / n``, the
    maximum-likelihood objective of the language model (Radford et al. 2018, eq. 1) restricted to
    the tokens the policy is to write. Normalised per token over the whole optimiser step, as
    :func:`policy_loss`, so micro-batches passing ``n_tokens_total`` give the step's gradient.

    Args:
        logp: (B, T) learner logprobs of each token (temperature 1, no truncation), with gradient.
        loss_mask: (B, T) 1 on the demonstrated (assistant) tokens, 0 elsewhere and on padding.
        n_tokens_total: target tokens in the whole optimiser step; defaults to this batch's count.

    Returns:
        Scalar tensor (nats per token).

    Raises:
        ValueError: shapes disagree.
    """
    if logp.shape != loss_mask.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and loss_mask {tuple(loss_mask.shape)} must both be (B, T)")
    mask = loss_mask.to(logp.dtype)
    denom = float(max(n_tokens_total if n_tokens_total is not None else int(mask.sum().item()), 1))
    return -(logp * mask).sum() / denom


def reference_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL of the policy to the reference, the k3 estimator GRPO adds to its loss.

    ``D = exp(ref - logp) - (ref - logp) - 1`` (Shao et al. 2024, DeepSeekMath, eq. 4; Schulman
    2020, "Approximating KL divergence", k3), an unbiased, non-negative estimate of
    ``KL(policy || reference)`` per token sampled from the policy; 0 where the two agree. Its
    gradient flows through ``logp`` only. The learner adds ``beta * sum(mask * D) / n_tokens_total``
    to the policy loss (``learner.kl_coef``; TRL's ``beta``, verl's ``kl_loss_coef`` with
    ``kl_loss_type: low_var_kl``).

    Args:
        logp: (B, T) learner logprobs, with gradient.
        ref_logp: (B, T) the reference policy's logprobs of the same tokens (no gradient).

    Returns:
        (B, T) float, >= 0 up to rounding; multiply by the loss mask before summing.

    Raises:
        ValueError: shapes disagree.
    """
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and ref_logp {tuple(ref_logp.shape)} must both be (B, T)")
    delta = ref_logp.detach() - logp
    return torch.exp(delta) - delta - 1
