"""The sampling distribution of one token: nucleus truncation, sampling, and token logprobs.

One definition, shared by the engine (behaviour policy) and the learner (which must compute
the same quantity for the importance ratio):

* ``temperature > 0``: the distribution sampled from is ``softmax(nucleus(logits / T, top_p))``,
  where ``nucleus`` sets to ``-inf`` every logit outside the smallest set of most likely tokens
  whose probability reaches ``top_p`` (Holtzman et al. 2020, "The Curious Case of Neural Text
  Degeneration", eq. 3). The logprob of a token is taken **after** temperature and **after** the
  nucleus truncation (renormalised), i.e. the log-probability of the distribution the token was
  actually drawn from. This is vLLM's ``--logprobs-mode processed_logprobs``.
* ``temperature == 0`` (greedy): the token is the argmax and its logprob is
  ``log_softmax(logits)`` at that token (temperature 1, no truncation), which is what vLLM
  reports for greedy requests.

It also owns the seed each sampled turn draws with (:func:`turn_seed`), so the in-process engine
and vLLM requests get the same seeds.
"""

from __future__ import annotations

import hashlib

import torch


def turn_seed(base_seed: int, rollout_id: str, turn: int) -> int:
    """The sampling seed of one turn of one rollout: fresh randomness per turn, reproducible per rollout.

    Every turn of a rollout used to sample with the rollout's one seed, and each request seeds a
    fresh generator, so turn 2 drew turn 1's random numbers (a two-turn env got the same reply
    twice). Hashing the turn index in gives each turn its own stream; rerunning the same rollout
    id with the same base seed draws the same tokens.

    Args:
        base_seed: the run's seed base (``OrchestratorConfig.seed``, the held-out ``seed``).
        rollout_id: the rollout's id (``<sample id>/a<attempt>``): attempts differ.
        turn: 0-based index of the assistant turn in the rollout.

    Returns:
        A non-negative integer below 2**63 (fits vLLM's int64 ``seed`` and ``torch.Generator``).
    """
    digest = hashlib.blake2b(f"{base_seed}/{rollout_id}/{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def nucleus_logits(scaled_logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Masks the logits outside the top-p nucleus with ``-inf``.

    Args:
        scaled_logits: logits already divided by the temperature, shape ``(..., V)``.
        top_p: nucleus mass in (0, 1]; 1 keeps every token.

    Returns:
        Tensor of the same shape; the most likely token is always kept.
    """
    if top_p >= 1.0:
        return scaled_logits
    sorted_logits, order = torch.sort(scaled_logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    drop_sorted = mass_before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return scaled_logits.masked_fill(drop, float("-inf"))


def sampling_log_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Log-probabilities of the distribution tokens are sampled from (see module docstring).

    Args:
        logits: raw model logits, shape ``(..., V)``, any float dtype (computed in float32).
        temperature: >= 0; 0 means greedy (logprobs at temperature 1, no truncation).
        top_p: nucleus mass in (0, 1]; ignored when greedy.

    Returns:
        Float32 tensor of shape ``(..., V)``.
    """
    logits = logits.float()
    if temperature == 0.0:
        return torch.log_softmax(logits, dim=-1)
    return torch.log_softmax(nucleus_logits(logits / temperature, top_p), dim=-1)


def token_logprobs(
    logits: torch.Tensor, token_ids: torch.Tensor, temperature: float, top_p: float = 1.0
) -> torch.Tensor:
    """Logprob of each given token under the sampling distribution; the learner's entry point.

    Args:
        logits: shape ``(..., V)``; for a sequence, the logits at position t score token t+1.
        token_ids: int tensor of shape ``(...)`` (the logits' shape without V).
        temperature: the rollout's sampling temperature (0 = greedy).
        top_p: the rollout's nucleus mass.

    Returns:
        Float32 tensor of shape ``(...)``; differentiable with respect to ``logits``.
    """
    log_probs = sampling_log_probs(logits, temperature, top_p)
    return log_probs.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1)


def sample_token(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> tuple[int, float]:
    """Samples one token from one row of logits and returns it with its logprob.

    Args:
        logits: shape ``(V,)``.
        temperature: 0 = greedy (argmax).
        top_p: nucleus mass.
        generator: source of randomness (a seeded one gives reproducible samples).

    Returns:
        ``(token_id, logprob)`` with the logprob of :func:`token_logprobs`.
    """
    log_probs = sampling_log_probs(logits, temperature, top_p)
    if temperature == 0.0:
        token = int(torch.argmax(log_probs))
    else:
        token = int(torch.multinomial(log_probs.exp(), 1, generator=generator))
    return token, float(log_probs[token])
