"""The learner on the real embedded model: it moves the policy toward rewarded samples,
publishes, and resumes from the bucket without training on a group twice."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from gymfleet.core.models import load_tokenizer
from gymfleet.core.records import ClaimedGroup, Trajectory
from gymfleet.trainer.bucket import AdapterBucket
from gymfleet.trainer.learner import Learner, LearnerConfig, sequence_logprobs
from gymfleet.trainer.rollout_policy import RolloutPolicy
from tests.trainer.lora import lora_model

pytestmark = pytest.mark.model


class MemoryGroupSource:
    """A GroupSource over a list of groups, with leases and acks like the store's."""

    def __init__(self, groups: dict[str, list[Trajectory]]) -> None:
        self.groups = groups
        self.claims: dict[str, tuple[str, float]] = {}
        self.acked: set[str] = set()
        self.claim_log: list[str] = []

    async def claim_groups(self, n: int, claimer: str, lease_s: float) -> list[ClaimedGroup]:
        now = time.time()
        free = [g for g in self.groups if g not in self.acked and (g not in self.claims or self.claims[g][1] < now)]
        out = []
        for gid in free[:n]:
            self.claims[gid] = (claimer, now + lease_s)
            self.claim_log.append(gid)
            out.append(ClaimedGroup(gid, self.groups[gid]))
        return out

    async def ack_groups(self, group_ids: list[str], claimer: str) -> None:
        self.acked.update(group_ids)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def _traj(tok, gid: str, i: int, prompt: str, answer: str, reward: float) -> Trajectory:
    p = tok(prompt).input_ids
    a = tok(answer).input_ids
    ids = np.array(p + a, np.int64)
    mask = np.array([0] * len(p) + [1] * len(a), np.uint8)
    return Trajectory(f"{gid}-{i}", "run", gid, "test/Env-v0", gid, token_ids=ids, loss_mask=mask,
                      logprobs=np.zeros(len(ids), np.float32), versions=np.where(mask, 0, -1), reward=reward)


def _with_behaviour_logprobs(model, trajs: list[Trajectory]) -> list[Trajectory]:
    with torch.no_grad():
        for t in trajs:
            ids = torch.from_numpy(t.token_ids.astype("int64"))[None]
            lp = sequence_logprobs(model, ids, torch.ones_like(ids))[0].numpy()
            t.logprobs = (lp * t.loss_mask).astype(np.float32)
    return trajs


def _answer_logp(learner: Learner, t: Trajectory) -> float:
    ids = torch.from_numpy(t.token_ids.astype("int64"))[None]
    with torch.no_grad():
        lp = sequence_logprobs(learner.model, ids, torch.ones_like(ids))[0]
    return float((lp * torch.from_numpy(t.loss_mask.astype("float32"))).sum())


async def test_learning_moves_toward_rewarded_sample_and_resumes(tokenizer, tmp_path) -> None:
    config = LearnerConfig(lora_rank=1, lora_alpha=4, learning_rate=5e-3, groups_per_step=1,
                           micro_batch_size=1, publish_every=2, target_modules=["q_proj", "v_proj"])
    prompt = "<|im_start|>user\nSay a colour.<|im_end|>\n<|im_start|>assistant\n"
    bucket = AdapterBucket(str(tmp_path / "bucket"), "run")
    source = MemoryGroupSource({})
    learner = Learner(config, RolloutPolicy(), source, bucket)
    groups = {}
    for g in range(4):
        gid = f"g{g}"
        groups[gid] = _with_behaviour_logprobs(learner.model, [
            _traj(tokenizer, gid, 0, prompt, "Blue.", 1.0),
            _traj(tokenizer, gid, 1, prompt, "I cannot do that.", 0.0),
        ])
    source.groups = groups
    good, bad = groups["g0"]
    before = _answer_logp(learner, good) - _answer_logp(learner, bad)

    m1 = await learner.run_step()
    assert m1 is not None and m1.published_version is None and np.isfinite(m1.loss)
    assert m1.masked_fraction == 0.0 and m1.mean_ratio == pytest.approx(1.0, abs=1e-3)
    assert source.acked == set()  # not acked before the publish commits
    m2 = await learner.run_step()
    assert m2.published_version == 1 and source.acked == {"g0", "g1"}
    after = _answer_logp(learner, good) - _answer_logp(learner, bad)
    assert after > before + 0.1, (before, after)

    # A third step trains g2 but the learner "dies" before publishing: g2 stays claimed, unacked.
    await learner.run_step()
    assert "g2" not in source.acked
    source.claims.clear()  # its lease expires

    restarted = Learner(config, RolloutPolicy(), source, bucket, claimer="learner-2")
    assert await restarted.resume()
    assert restarted.step == 2 and restarted.version == 1
    assert _answer_logp(restarted, good) - _answer_logp(restarted, bad) == pytest.approx(after, abs=1e-4)
    m = await restarted.run_step()
    m = await restarted.run_step()
    assert m.published_version == 2
    # g2 was trained on again only because the weights that saw it were never published.
    assert source.claim_log.count("g0") == 1 and source.claim_log.count("g1") == 1
    assert source.acked == {"g0", "g1", "g2", "g3"}
    assert await restarted.run_step() is None


async def test_a_zero_variance_group_is_counted_acked_untrained_and_the_step_refilled(tokenizer, tmp_path) -> None:
    config = LearnerConfig(lora_rank=1, groups_per_step=1, micro_batch_size=2, publish_every=2,
                           target_modules=["q_proj"])
    prompt = "<|im_start|>user\nSay a colour.<|im_end|>\n<|im_start|>assistant\n"
    source = MemoryGroupSource({})
    learner = Learner(config, RolloutPolicy(), source, AdapterBucket(str(tmp_path / "bucket"), "run"))
    source.groups = {  # "same" is claimed first: both samples earned 1, so its advantages are 0
        gid: _with_behaviour_logprobs(learner.model, [_traj(tokenizer, gid, 0, prompt, "Blue.", 1.0),
                                                      _traj(tokenizer, gid, 1, prompt, "Red.", r)])
        for gid, r in (("same", 1.0), ("varied", 0.0))
    }
    m = await learner.run_step()
    assert m is not None and m.step == 1 and m.n_groups == 1 and m.mean_reward == pytest.approx(0.5)
    assert m.n_zero_variance_groups == 1 and m.n_extra_claims == 1 and m.n_groups_short == 0
    # the zero-variance group is consumed at once (no gradient to publish first); the trained one
    # waits for the publish
    assert source.claim_log == ["same", "varied"] and source.acked == {"same"}
    assert learner.pending_group_ids == ["varied"]
    assert await learner.run_step() is None


def test_scoring_only_the_loss_tokens_gives_the_same_logprobs_and_adapter_gradient(smollm_model) -> None:
    """``sequence_logprobs(..., loss_mask=)`` projects only the positions that predict a loss
    token onto the vocabulary (``logits_to_keep``); on those tokens it must equal scoring every
    position, value and LoRA gradient alike, at a temperature and nucleus a rollout uses."""
    model = lora_model(smollm_model)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(5, 40000, (3, 24), generator=gen)
    attention = torch.ones_like(ids)
    attention[2, 17:] = 0  # right padding
    mask = torch.zeros(3, 24)
    mask[0, 6:11] = 1  # two turns of policy tokens between observations
    mask[0, 15:20] = 1
    mask[1, 20:24] = 1
    mask[2, 9:17] = 1
    advantages = torch.tensor([[1.0], [-0.5], [0.25]])

    def scored(**kw) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logp = sequence_logprobs(model, ids, attention, 0.8, 1.0, **kw)
        (-(logp * mask * advantages).sum()).backward()
        grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
        return (logp * mask).detach(), grads

    full, full_grads = scored()
    kept, kept_grads = scored(loss_mask=mask)
    assert torch.allclose(kept, full, atol=1e-5)
    assert kept.ne(0).sum() == mask.sum()  # every loss token scored, nothing else
    assert len(kept_grads) == len(full_grads) > 0
    for a, b in zip(kept_grads, full_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    assert any(g.abs().sum() > 0 for g in kept_grads)
    # a micro-batch without one policy token (all past max_tokens) scores nothing and still backpropagates
    model.zero_grad(set_to_none=True)
    none = sequence_logprobs(model, ids[:1], attention[:1], 0.8, 1.0, loss_mask=torch.zeros(1, 24))
    assert none.shape == (1, 24) and not none.any()
    none.sum().backward()
