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
