"""The warm start's pieces without the model: the SFT loss by hand, its token normalisation across
micro-batches, and the refusal to publish over a run that already has a version."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gymfleet.core.errors import TrainError
from gymfleet.trainer import AdapterBucket, SFTConfig, warm_start
from gymfleet.trainer.learner import LearnerConfig
from gymfleet.trainer.rollout_policy import RolloutPolicy
from gymfleet.trainer.loss import sft_loss


def test_sft_loss_is_the_mean_nll_of_the_masked_tokens() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.9], [0.1, 0.5, 1.0]]))
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]])
    expected = -(math.log(0.25) + math.log(0.9) + math.log(0.5)) / 3
    assert float(sft_loss(logp, mask)) == pytest.approx(expected)


def test_micro_batches_passing_the_step_total_sum_to_the_whole_step() -> None:
    logp = torch.randn(4, 5)
    mask = torch.tensor([[0, 1, 1, 0, 0], [1, 1, 1, 1, 0], [0, 0, 0, 1, 1], [1, 0, 0, 0, 0]])
    whole = sft_loss(logp, mask)
    total = int(mask.sum())  # 9
    parts = sft_loss(logp[:2], mask[:2], n_tokens_total=total) + sft_loss(logp[2:], mask[2:], n_tokens_total=total)
    assert float(parts) == pytest.approx(float(whole))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        sft_loss(logp, mask[:, :3])


def test_a_warm_start_never_publishes_over_a_run_that_has_a_version(tmp_path: Path) -> None:
    bucket = AdapterBucket(str(tmp_path / "bucket"), "run")
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "adapter_model.safetensors").write_bytes(b"x")
    bucket.publish(1, tmp_path / "v", {"step": 3})
    with pytest.raises(TrainError, match=r"already holds versions \[1\].*new run id"):
        warm_start(LearnerConfig(), RolloutPolicy(), bucket, [], SFTConfig())  # refused before any weights load
