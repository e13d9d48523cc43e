"""From claimed groups of trajectories to the padded tensors one learner step trains on.

Rules (docs/design.md, Learner): samples that failed for infrastructure reasons (any status whose
``trains`` is False) never reach the loss; samples whose oldest generated token's policy
version lags the learner by more than ``max_staleness`` (:func:`gymfleet.core.records.staleness`) are dropped; a group keeping more than
half of its samples is padded back to its size by repeating kept samples (in order), else the
whole group is dropped. Advantages are computed per group after padding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from gymfleet.core.records import Trajectory, staleness
from gymfleet.trainer.step_metrics import GroupFilterStats
from gymfleet.trainer.loss import group_advantages


def repair_groups(
    groups: Sequence[Sequence[Trajectory]], learner_version: int, max_staleness: int
) -> tuple[list[list[Trajectory]], GroupFilterStats]:
    """Drops untrainable and stale samples and pads or drops each group.

    Args:
        groups: each the G samples of one task instance.
        learner_version: the policy version the learner is training (newest published).
        max_staleness: most versions a sample's oldest token may lag ``learner_version``.

    Returns:
        The trainable groups (each back to its original size) and what was dropped.
    """
    stats = GroupFilterStats(groups_in=len(groups))
    kept_groups = []
    for group in groups:
        kept = []
        for traj in group:
            if not traj.status.trains or traj.n_generated_tokens == 0:
                stats.samples_not_trainable += 1
                continue
            lag = staleness(learner_version, max(traj.oldest_version, 0))
            if lag > max_staleness:
                stats.samples_stale += 1
                continue
            kept.append(traj)
            stats.staleness.append(lag)
        if len(kept) * 2 <= len(group):
            stats.groups_dropped += 1
            continue
        padded = kept + [kept[i % len(kept)] for i in range(len(group) - len(kept))]
        stats.samples_padded += len(group) - len(kept)
        kept_groups.append(padded)
    return kept_groups, stats


@dataclass(frozen=True)
class TrainBatch:
    """Right-padded tensors for one optimiser step (each sequence ends at its last policy token).

    Attributes:
        input_ids: (B, T) int64 token ids (pad id 0 beyond each length).
        attention_mask: (B, T) int64, 1 on real tokens.
        loss_mask: (B, T) float32, 1 on policy-generated tokens.
        behaviour_logp: (B, T) float32 rollout-engine logprobs (0 off the loss mask).
        advantages: (B,) float32 group-relative advantages.
        rewards: (B,) float32.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    behaviour_logp: torch.Tensor
    advantages: torch.Tensor
    rewards: torch.Tensor

    @property
    def n_generated_tokens(self) -> int:
        """Tokens the loss is normalised by."""
        return int(self.loss_mask.sum().item())

    def to(self, device: Any) -> TrainBatch:
        """This batch with every tensor on ``device`` (the model's)."""
        return dataclasses.replace(self, **{f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                                            if isinstance(getattr(self, f.name), torch.Tensor)})

    def split(self, micro_batch_size: int) -> list[TrainBatch]:
        """Micro-batches of at most ``micro_batch_size`` sequences, longest first, each trimmed to
        its own longest sequence.

        Sequences are cut into micro-batches in order of length (descending, ties in batch order),
        so short ones share a micro-batch with short ones and do not pay for long ones: on the
        terminal tier, whose multi-turn trajectories range from a few hundred to ``max_tokens``
        tokens, that pads far fewer tokens than cutting in group order. The step's gradient does
        not depend on the order: the loss is a sum over tokens divided by the step's token count
        (:func:`gymfleet.trainer.loss.policy_loss`), and micro-batch gradients are summed.
        """
        lengths = self.attention_mask.sum(dim=1)
        order = torch.argsort(lengths, descending=True, stable=True)
        out = []
        for i in range(0, len(order), micro_batch_size):
            rows = order[i:i + micro_batch_size]
            t = int(lengths[rows].max().item())
            out.append(
                TrainBatch(
                    self.input_ids[rows, :t], self.attention_mask[rows, :t], self.loss_mask[rows, :t],
                    self.behaviour_logp[rows, :t], self.advantages[rows], self.rewards[rows],
                )
            )
        return out


def _trained_length(traj: Trajectory, max_tokens: int | None) -> int:
    """Tokens of ``traj`` a step computes: its first ``max_tokens``, cut after the last policy
    token among them (what follows, an env's last observation, changes no trained logprob under
    causal attention). 1 when none of them is a policy token."""
    n = min(traj.n_tokens, max_tokens or traj.n_tokens)
    generated = np.flatnonzero(traj.loss_mask[:n])
    return int(generated[-1]) + 1 if len(generated) else 1


def collate(groups: Sequence[Sequence[Trajectory]], max_tokens: int | None = None) -> TrainBatch:
    """Pads the trajectories of ``groups`` into one :class:`TrainBatch`.

    Each sequence keeps its first ``max_tokens`` tokens, and of those only up to its last policy
    token: on the terminal tier that left 154 of a median 246 tokens. A sample's branches
    (``Trajectory.branches``: the other leaves of a harness session tree) are sequences of their
    own with the sample's advantage; the advantages are over the group's samples, not its rows.

    Args:
        groups: repaired groups (see :func:`repair_groups`).
        max_tokens: truncate each sequence to its first ``max_tokens`` tokens.

    Raises:
        ValueError: no trajectories.
    """
    trajs = [row for g in groups for t in g for row in (t, *t.branches)]
    if not trajs:
        raise ValueError("collate needs at least one trajectory; repair_groups dropped every group")
    advantages = torch.cat([group_advantages(torch.tensor([t.reward for t in g])).repeat_interleave(
        torch.tensor([1 + len(t.branches) for t in g])) for g in groups])
    lengths = [_trained_length(t, max_tokens) for t in trajs]
    b, t_max = len(trajs), max(lengths)
    input_ids = torch.zeros(b, t_max, dtype=torch.int64)
    attention = torch.zeros(b, t_max, dtype=torch.int64)
    loss_mask = torch.zeros(b, t_max, dtype=torch.float32)
    behaviour = torch.zeros(b, t_max, dtype=torch.float32)
    for i, (traj, n) in enumerate(zip(trajs, lengths, strict=True)):
        input_ids[i, :n] = torch.from_numpy(traj.token_ids[:n].astype("int64"))
        attention[i, :n] = 1
        loss_mask[i, :n] = torch.from_numpy(traj.loss_mask[:n].astype("float32"))
        behaviour[i, :n] = torch.from_numpy(traj.logprobs[:n].astype("float32"))
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    return TrainBatch(input_ids, attention, loss_mask, behaviour * loss_mask, advantages, rewards)
