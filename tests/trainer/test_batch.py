"""Group repair and collation follow the rules of docs/design.md (Learner)."""

from __future__ import annotations

import numpy as np
import pytest

from gymfleet.core.records import RolloutStatus, Trajectory
from gymfleet.trainer.batch import collate, repair_groups


def traj(i: int, reward: float, *, status=RolloutStatus.ok, version: int = 5, n: int = 4) -> Trajectory:
    mask = np.array([0, 0] + [1] * (n - 2), np.uint8)
    return Trajectory(
        f"r{i}", "run", "g", "env", "inst",
        token_ids=np.arange(n) + 10 * i, loss_mask=mask,
        logprobs=np.where(mask, -0.5, 0.0), versions=np.where(mask, version, -1),
        reward=reward, status=status,
    )


def test_infra_failures_and_stale_samples_are_dropped_and_group_padded() -> None:
    group = [traj(0, 1.0), traj(1, 0.0), traj(2, 1.0, status=RolloutStatus.infra_error),
             traj(3, 0.0, version=1)]
    # 2 of 4 kept is not more than half: dropped.
    kept, stats = repair_groups([group], learner_version=5, max_staleness=2)
    assert kept == [] and stats.groups_dropped == 1
    assert stats.samples_not_trainable == 1 and stats.samples_stale == 1
    group5 = group + [traj(4, 1.0)]
    kept, stats = repair_groups([group5], learner_version=5, max_staleness=2)
    assert [t.rollout_id for t in kept[0]] == ["r0", "r1", "r4", "r0", "r1"]
    assert stats.samples_padded == 2 and stats.staleness == [0, 0, 0]


def test_collate_pads_and_aligns_masks() -> None:
    groups = [[traj(0, 1.0, n=5), traj(1, 0.0, n=3)]]
    batch = collate(groups)
    assert batch.input_ids.shape == (2, 5)
    assert batch.attention_mask[1].tolist() == [1, 1, 1, 0, 0]
    assert batch.loss_mask[1].tolist() == [0, 0, 1, 0, 0]
    assert batch.behaviour_logp[0].tolist() == [0, 0, -0.5, -0.5, -0.5]
    assert batch.advantages.tolist() == pytest.approx([1.0, -1.0], abs=1e-5)
    assert batch.n_generated_tokens == 4
    micro = batch.split(1)
    assert [m.input_ids.shape for m in micro] == [(1, 5), (1, 3)]


def test_collate_of_nothing_names_the_cause() -> None:
    with pytest.raises(ValueError, match="dropped every group"):
        collate([])


def test_micro_batches_are_cut_by_length_so_short_sequences_pad_little() -> None:
    lengths = [3, 12, 4, 11]
    batch = collate([[traj(i, float(i % 2), n=n) for i, n in enumerate(lengths)]])
    micro = batch.split(2)
    # group order would pad both micro-batches to 12 and 11 (46 slots); by length, 12+11 and 4+3 (32).
    assert [m.input_ids.shape for m in micro] == [(2, 12), (2, 4)]
    assert sum(int(m.input_ids.numel()) for m in micro) == 32
    # every row keeps its own tokens, masks, behaviour logprobs, advantage and reward
    rows = [(m.input_ids[r], m.loss_mask[r], m.behaviour_logp[r], m.advantages[r], m.rewards[r])
            for m in micro for r in range(len(m.input_ids))]
    assert [int(r[0][0]) // 10 for r in rows] == [1, 3, 2, 0]
    for ids, mask, logp, adv, reward in rows:
        i = int(ids[0]) // 10
        n = lengths[i]
        assert ids[:n].tolist() == batch.input_ids[i, :n].tolist()
        assert mask.tolist() == batch.loss_mask[i, :len(mask)].tolist()
        assert logp.tolist() == batch.behaviour_logp[i, :len(logp)].tolist()
        assert float(adv) == float(batch.advantages[i]) and float(reward) == float(batch.rewards[i])


def test_the_step_gradient_does_not_depend_on_how_micro_batches_are_cut() -> None:
    import torch

    from gymfleet.trainer.loss import policy_loss

    lengths = [3, 12, 4, 11, 7, 5]
    batch = collate([[traj(i, float(i % 3 == 0), n=n) for i, n in enumerate(lengths)]])
    torch.manual_seed(0)
    table = torch.nn.Parameter(torch.randn(64) * 0.1)

    def grad(micro_batches) -> torch.Tensor:
        table.grad = None
        for m in micro_batches:
            logp = torch.nn.functional.logsigmoid(table[m.input_ids % 64]) - 1.0
            out = policy_loss(logp, m.behaviour_logp, m.advantages, m.loss_mask,
                              n_tokens_total=batch.n_generated_tokens)
            out.loss.backward()
        return table.grad.clone()

    whole = grad([batch])
    for size in (1, 2, 4):
        assert torch.allclose(grad(batch.split(size)), whole, atol=1e-7)


def test_a_sequence_ends_at_its_last_policy_token_within_max_tokens() -> None:
    # policy tokens at 2-3, then an env observation (4-7) the loss never sees
    tail = traj(0, 1.0, n=8)
    tail.loss_mask = np.array([0, 0, 1, 1, 0, 0, 0, 0], np.uint8)
    whole = traj(1, 0.0, n=6)
    batch = collate([[tail, whole]])
    assert batch.attention_mask.sum(dim=1).tolist() == [4, 6]
    assert batch.n_generated_tokens == 2 + 4
    # max_tokens first: of whole's first 3 tokens only position 2 is the policy's
    assert collate([[tail, whole]], max_tokens=3).attention_mask.sum(dim=1).tolist() == [3, 3]
    # no policy token within max_tokens: one token, nothing trained
    late = traj(2, 1.0, n=8)
    late.loss_mask = np.array([0, 0, 0, 0, 0, 1, 1, 0], np.uint8)
    cut = collate([[late, whole]], max_tokens=4)
    assert cut.attention_mask.sum(dim=1).tolist() == [1, 4] and cut.loss_mask[0].sum() == 0


def test_a_samples_branches_are_rows_of_their_own_with_the_samples_advantage() -> None:
    # sample r0 (reward 1) ended on one leaf and left two earlier ones (a harness that rewrote its history)
    main, other = traj(0, 1.0, n=5), traj(1, 0.0, n=4)
    main.branches = [traj(7, 1.0, n=3), traj(8, 1.0, n=4)]
    batch = collate([[main, other]])
    assert batch.input_ids.shape == (4, 5)
    assert batch.input_ids[:, 0].tolist() == [0, 70, 80, 10]  # main, its branches, then the next sample
    # advantages are over the 2 samples (not the 4 rows): the branches share their sample's
    assert batch.advantages.tolist() == pytest.approx([1.0, 1.0, 1.0, -1.0], abs=1e-5)
    assert batch.n_generated_tokens == 3 + 1 + 2 + 2
    # a stale branch makes its sample stale
    main.branches[0].versions[main.branches[0].loss_mask == 1] = 1
    kept, stats = repair_groups([[main, other, traj(2, 0.0)]], learner_version=5, max_staleness=2)
    assert stats.samples_stale == 1 and [t.rollout_id for t in kept[0]] == ["r1", "r2", "r1"]
