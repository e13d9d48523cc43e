"""GRPO loss and adapter-gradient parity with TRL's own ``GRPOTrainer._compute_loss``.

The same inputs go to both: prompt and completion token ids, the behaviour policy's logprobs
(TRL's ``old_per_token_logps``), the rewards, and one LoRA initialisation (deep copies of one
peft model). gymfleet's side is the learner's own path: ``collate`` of real Trajectories, the
learner's micro-batches, ``sequence_logprobs`` and ``policy_loss``. TRL's side is a constructed
``GRPOTrainer`` on the embedded model calling its ``compute_loss``.

Matching settings: gymfleet ``ppo_clip`` (token-level sum over the step / its generated tokens)
against TRL ``loss_type="dapo"`` and ``"bnpo"`` (the same aggregation for one batch), the same
clip band (epsilon 0.2, epsilon_high 0.28), ``beta=0`` (no KL), token-level importance sampling,
and TRL's group reward scaling (sample std + 1e-4), which gymfleet's ``group_advantages`` gives
with ``unbiased=True, eps=1e-4``. Where gymfleet's defaults differ from TRL's (dsis masking,
population std) is written down in docs/train.md ("gymfleet's GRPO and TRL's").
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gymfleet.core.records import Trajectory
from gymfleet.trainer.batch import collate
from gymfleet.trainer.learner import sequence_logprobs
from gymfleet.trainer.loss import LossConfig, group_advantages, policy_loss
from tests.trainer.lora import lora_model

pytestmark = [pytest.mark.model, pytest.mark.timeout(1200)]
G, PROMPT_LEN, TEMPERATURE = 4, 7, 0.8
COMPLETION_LENS = [5, 9, 3, 9, 7, 2, 9, 6]  # right padding, as TRL's completion_mask
REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.0, 0.25, 0.0, 1.0]]
BAND = LossConfig(eps_low=0.2, eps_high=0.28)


def sample_inputs(model: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids (B, P + C) right-padded, completion mask (B, C) and behaviour logprobs (B, C).

    The behaviour logprobs are the current policy's plus noise, so the importance ratios spread
    over both sides of the clip band (some tokens are clipped).
    """
    gen = torch.Generator().manual_seed(1)
    b, c = len(COMPLETION_LENS), max(COMPLETION_LENS)
    ids = torch.randint(100, 5000, (b, PROMPT_LEN + c), generator=gen)
    mask = (torch.arange(c)[None, :] < torch.tensor(COMPLETION_LENS)[:, None]).long()
    ids[:, PROMPT_LEN:] *= mask  # pad id 0, as collate pads
    attention = torch.cat([torch.ones(b, PROMPT_LEN, dtype=torch.long), mask], dim=1)
    with torch.no_grad():
        logp = sequence_logprobs(model, ids, attention, TEMPERATURE)[:, PROMPT_LEN:]
    behaviour = (logp + 0.3 * torch.randn(logp.shape, generator=gen)) * mask
    return ids, mask, behaviour


def gymfleet_step(model: Any, ids: torch.Tensor, mask: torch.Tensor, behaviour: torch.Tensor) -> float:
    """The learner's step (Learner.train_on without the optimiser): returns the loss; grads accumulate."""
    trajs = []
    for i, n in enumerate(COMPLETION_LENS):
        length = PROMPT_LEN + n
        loss_mask = np.r_[np.zeros(PROMPT_LEN), np.ones(n)].astype(np.uint8)
        logprobs = np.r_[np.zeros(PROMPT_LEN), behaviour[i, :n].numpy()].astype(np.float32)
        trajs.append(Trajectory(f"r{i}", "run", f"g{i // G}", "env", "i", token_ids=ids[i, :length].numpy().astype(np.int32),
                                loss_mask=loss_mask, logprobs=logprobs, versions=np.zeros(length, np.int32),
                                reward=REWARDS[i // G][i % G]))
    batch = collate([trajs[:G], trajs[G:]])
    # TRL's reward scaling ("group": sample std + 1e-4); the learner's default is population std
    batch = dataclasses.replace(batch, advantages=group_advantages(torch.tensor(REWARDS), unbiased=True, eps=1e-4).flatten())
    total, loss = batch.n_generated_tokens, 0.0
    for micro in batch.split(3):  # micro-batches sum to the step's loss and gradient
        logp = sequence_logprobs(model, micro.input_ids, micro.attention_mask, TEMPERATURE)
        out = policy_loss(logp, micro.behaviour_logp, micro.advantages, micro.loss_mask,
                          objective="ppo_clip", config=BAND, n_tokens_total=total)
        out.loss.backward()
        loss += float(out.loss.detach())
    return loss


def trl_step(model: Any, tokenizer: Any, loss_type: str, tmp_path: Path, ids: torch.Tensor, mask: torch.Tensor,
             behaviour: torch.Tensor) -> float:
    """TRL's GRPOTrainer.compute_loss on the same inputs (advantages from its own scaling rule)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer.utils import nanstd

    args = GRPOConfig(
        output_dir=str(tmp_path / loss_type), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        per_device_train_batch_size=len(COMPLETION_LENS), gradient_accumulation_steps=1, num_generations=G,
        max_completion_length=mask.shape[1], temperature=TEMPERATURE, top_p=1.0, beta=0.0, epsilon=BAND.eps_low,
        epsilon_high=BAND.eps_high, loss_type=loss_type, scale_rewards="group", importance_sampling_level="token",
        num_iterations=1, gradient_checkpointing=False, disable_tqdm=True,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                          train_dataset=Dataset.from_list([{"prompt": "hi"}] * len(COMPLETION_LENS)),
                          processing_class=tokenizer)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(); one accumulation step
    # _generate_and_score_completions' group scaling, with TRL's own nanstd (sample std):
    rewards = torch.tensor(REWARDS)
    advantages = ((rewards - rewards.mean(dim=1, keepdim=True)) / (nanstd(rewards, dim=1, keepdim=True) + 1e-4)).flatten()
    inputs = {
        "prompt_ids": ids[:, :PROMPT_LEN], "prompt_mask": torch.ones(len(ids), PROMPT_LEN, dtype=torch.long),
        "completion_ids": ids[:, PROMPT_LEN:], "completion_mask": mask, "advantages": advantages,
        "old_per_token_logps": behaviour, "num_items_in_batch": mask.sum(),
    }
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    return float(loss.detach())


def lora_grads(model: Any) -> dict[str, torch.Tensor]:
    return {n.replace("base_model.model.", ""): p.grad.clone() for n, p in model.named_parameters()
            if "lora_" in n and p.grad is not None}


def test_group_advantages_match_trl_group_scaling() -> None:
    from trl.trainer.utils import nanstd

    rewards = torch.tensor(REWARDS)
    trl = (rewards - rewards.mean(dim=1, keepdim=True)) / (nanstd(rewards, dim=1, keepdim=True) + 1e-4)
    assert torch.allclose(group_advantages(rewards, unbiased=True, eps=1e-4), trl, atol=1e-6)
    # the learner's default (population std) is sqrt(G / (G - 1)) times larger, not smaller
    ratio = group_advantages(rewards)[0, 0] / trl[0, 0]
    assert float(ratio) == pytest.approx((G / (G - 1)) ** 0.5, rel=1e-3)


@pytest.mark.parametrize("loss_type", ["dapo", "bnpo"])
def test_loss_and_adapter_gradients_equal_trl(loss_type: str, smollm_model: Any, smollm_tokenizer: Any,
                                              tmp_path: Path) -> None:
    init = lora_model(smollm_model)
    ids, mask, behaviour = sample_inputs(init)
    ours, theirs = copy.deepcopy(init), copy.deepcopy(init)
    ours.train()
    loss_gf = gymfleet_step(ours, ids, mask, behaviour)
    loss_trl = trl_step(theirs, smollm_tokenizer, loss_type, tmp_path, ids, mask, behaviour)

    ratio = torch.exp(sequence_logprobs(init, torch.cat([ids[:, :PROMPT_LEN], ids[:, PROMPT_LEN:]], 1),
                                        torch.cat([torch.ones(len(ids), PROMPT_LEN, dtype=torch.long), mask], 1),
                                        TEMPERATURE)[:, PROMPT_LEN:].detach() - behaviour)[mask.bool()]
    clipped = ((ratio < 1 - BAND.eps_low) | (ratio > 1 + BAND.eps_high)).float().mean()
    assert 0.1 < float(clipped) < 0.9, clipped  # the clip band is exercised, on both sides of it
    assert loss_gf != 0.0 and abs(loss_gf - loss_trl) <= 1e-5, (loss_gf, loss_trl)
    grads_gf, grads_trl = lora_grads(ours), lora_grads(theirs)
    assert grads_gf.keys() == grads_trl.keys() and len(grads_gf) == 2 * 2 * 30  # A and B, q and v, 30 layers
    scale = max(float(g.abs().max()) for g in grads_trl.values())
    assert scale > 0
    for name, g in grads_gf.items():
        assert torch.allclose(g, grads_trl[name], atol=1e-5, rtol=1e-4), (name, float((g - grads_trl[name]).abs().max()))
