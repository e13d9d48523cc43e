"""The learner's knobs: the learning-rate schedule per step and across a resume, the KL estimator,
and gradient checkpointing's peak memory on a long sequence (measured). The KL to the base model
per step, the step row's metrics and a resume continuing the schedule on the real learner are
checked in ``test_data_parallel.py`` (one model load for both)."""

from __future__ import annotations

import ctypes
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from gymfleet.core.records import Trajectory
from gymfleet.trainer.batch import collate
from gymfleet.trainer.learner_state import load_learner_state, save_learner_state
from gymfleet.trainer.loss import reference_kl
from gymfleet.trainer.schedule import make_schedule


def _lrs(name: str, warmup: int, decay: int | None, n: int, lr: float = 1.0) -> list[float]:
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=lr)
    sched = make_schedule(name, opt, warmup, decay)
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_schedules_give_the_documented_learning_rate_at_every_step() -> None:
    assert _lrs("constant", 0, None, 3) == [1.0, 1.0, 1.0]
    assert _lrs("constant", 2, None, 4) == [0.0, 0.5, 1.0, 1.0]
    assert _lrs("linear", 2, 6, 7) == pytest.approx([0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0])
    cosine = [0.0, 0.5] + [0.5 * (1 + math.cos(math.pi * (k - 2) / 4)) for k in range(2, 7)]
    assert _lrs("cosine", 2, 6, 7, lr=2.0) == pytest.approx([2 * v for v in cosine])
    with pytest.raises(ValueError, match="lr_decay_steps"):
        _lrs("cosine", 0, None, 1)
    with pytest.raises(ValueError, match="choose one of constant, linear, cosine"):
        _lrs("step", 0, 5, 1)


def test_a_resumed_optimiser_state_continues_the_schedule(tmp_path: Path) -> None:
    param = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([param], lr=0.1)
    sched = make_schedule("linear", opt, 1, 5)
    for _ in range(3):
        param.grad = torch.ones(3)
        opt.step()
        sched.step()
    save_learner_state(opt, 3, tmp_path)
    expected = opt.param_groups[0]["lr"]

    fresh = torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))], lr=0.1)
    state, step = load_learner_state(tmp_path)
    fresh.load_state_dict(state)
    make_schedule("linear", fresh, 1, 5, done_steps=step)
    assert step == 3 and fresh.param_groups[0]["lr"] == pytest.approx(expected) == pytest.approx(0.1 * 2 / 4)


def test_reference_kl_is_zero_on_agreement_positive_otherwise_and_differentiable() -> None:
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    assert torch.equal(reference_kl(logp, logp.detach()), torch.zeros(1, 3))
    kl = reference_kl(logp, torch.tensor([[-1.5, -1.0, -0.5]]))
    assert (kl[0, :2] > 0).all() and kl[0, 2] == 0
    kl.sum().backward()
    assert logp.grad is not None and logp.grad[0, 2] == 0 and logp.grad[0, 0] != 0


def _trajectory(gid: str, i: int, ids: np.ndarray, n_prompt: int, reward: float) -> Trajectory:
    mask = np.array([0] * n_prompt + [1] * (len(ids) - n_prompt), np.uint8)
    return Trajectory(f"{gid}-{i}", "run", gid, "test/Env-v0", gid, token_ids=ids.astype(np.int64), loss_mask=mask,
                      logprobs=np.where(mask, -3.0, 0).astype(np.float32), versions=np.where(mask, 0, -1),
                      reward=reward)


def _groups(n_groups: int, n_tokens: int, seed: int = 0) -> list[list[Trajectory]]:
    rng = np.random.default_rng(seed)
    return [[_trajectory(f"g{g}", i, rng.integers(10, 20000, n_tokens), n_tokens // 2, float(i == 0))
             for i in range(2)] for g in range(n_groups)]


def _status_bytes(key: str) -> int:
    return int(re.search(rf"{key}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def _peak_bytes(fn) -> int:
    """Peak resident memory (bytes) this process reached while ``fn`` ran, above where it started:
    Linux's high-water mark ``VmHWM``, reset first (``/proc/self/clear_refs``, value 5), after
    glibc gave freed memory back (``malloc_trim``): else a run reuses what an earlier one freed
    without growing the resident set, and its peak reads low."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_bytes("VmRSS")
    fn()
    return _status_bytes("VmHWM") - before


@pytest.mark.model
@pytest.mark.slow
def test_gradient_checkpointing_lowers_the_peak_memory_of_a_long_sequence(tmp_path: Path) -> None:
    from gymfleet.trainer.bucket import AdapterBucket
    from gymfleet.trainer.learner import Learner, LearnerConfig
    from gymfleet.trainer.rollout_policy import RolloutPolicy
    from tests.trainer.test_learner import MemoryGroupSource

    torch.set_num_threads(2)
    config = LearnerConfig(lora_rank=2, objective="none", gradient_checkpointing=True, max_tokens=4096,
                           micro_batch_size=1, target_modules=["q_proj", "v_proj"])
    learner = Learner(config, RolloutPolicy(), MemoryGroupSource({}), AdapterBucket(str(tmp_path), "run"))
    base = learner.model.get_base_model()
    assert base.is_activation_checkpointing
    learner.train_batch(collate([_groups(1, 64)[0][:1]], config.max_tokens))  # one-off allocations (Adam state, pools)
    rng = np.random.default_rng(0)  # a long context and a short reply: a late turn of a multi-turn episode
    batch = collate([[_trajectory("long", 0, rng.integers(10, 20000, 384), 376, 1.0)]], config.max_tokens)
    with_checkpointing = _peak_bytes(lambda: learner.train_batch(batch))
    base.activation_checkpointing_disable()
    without = _peak_bytes(lambda: learner.train_batch(batch))
    print(f"peak above the step's start: {with_checkpointing / 2**20:.0f} MiB with checkpointing, "
          f"{without / 2**20:.0f} MiB without")
    assert with_checkpointing < 0.6 * without, (with_checkpointing, without)
