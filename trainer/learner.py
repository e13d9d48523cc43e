"""The GRPO learner: claims complete groups, trains a LoRA adapter on them, publishes it.

One step: claim ``groups_per_step`` groups from the store -> drop untrainable and stale samples,
repair groups (:mod:`gymfleet.trainer.batch`) -> set aside the groups whose rewards are all equal
and claim more until the step holds ``groups_per_step`` groups with variance (dynamic sampling,
:mod:`gymfleet.trainer.signal`) -> learner logprobs per micro-batch -> policy
loss (:mod:`gymfleet.trainer.loss`) -> backward -> optimiser step. Every ``publish_every``
steps the adapter, the optimiser state and the ids of the groups consumed since the last
publish are committed to the bucket, and only then are those groups acknowledged in the store.
A learner killed between two publishes therefore loses only un-acknowledged claims, which
expire and are trained on again by the restarted learner (whose weights never saw them): no
group is trained on twice, none is lost.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch

from gymfleet.core.models import ModelSpec, hub_id, load_causal_lm
from gymfleet.core.records import Trajectory
from gymfleet.core.sampling import sampling_log_probs, token_logprobs
from gymfleet.trainer.batch import TrainBatch, collate
from gymfleet.trainer.bucket import AdapterBucket
from gymfleet.trainer.errors import BucketError
from gymfleet.trainer.learner_state import check_fits, load_learner_state, save_learner_state
from gymfleet.trainer.data_parallel import RankGroup, shard_batch
from gymfleet.trainer.learner_config import RUN_OWNED, LearnerConfig
from gymfleet.trainer.loss import LossConfig, LossOutput, policy_loss, reference_kl
from gymfleet.trainer.model_card import AdapterCard
from gymfleet.trainer.rollout_policy import RolloutPolicy
from gymfleet.trainer.schedule import make_schedule
from gymfleet.trainer.signal import GroupSource, StepClaimer
from gymfleet.trainer.step_metrics import StepMetrics
from gymfleet.trainer.weights import TRAINED_WEIGHTS, TrainedWeights

__all__ = ["RUN_OWNED", "Learner", "LearnerConfig", "StepMetrics", "sequence_logprobs"]

log = logging.getLogger(__name__)

RECENT_STEPS = 10
"""Steps whose mean reward a published version's model card lists."""


def sequence_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0,
    loss_mask: torch.Tensor | None = None, entropy: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Logprob of each token given the tokens before it, under the rollout's sampling distribution.

    The engine's own definition (:func:`gymfleet.core.sampling.token_logprobs`:
    after temperature and nucleus truncation, renormalised), so that
    ``exp(logp - behaviour_logp)`` is exactly 1 for an unchanged policy.

    With ``loss_mask``, only the tokens on it are scored: the model projects onto the vocabulary
    only the positions that predict them (transformers' ``logits_to_keep``, as a (B, T) boolean
    mask), which skips the LM head and the vocabulary-wide softmax everywhere else: on multi-turn
    trajectories most tokens are prompts and observations, and SmolLM2's vocabulary has 49,152
    entries.

    Args:
        model: a causal LM returning ``.logits`` (B, T, V); with ``loss_mask``, one whose forward
            takes ``logits_to_keep`` (every transformers causal LM does, peft-wrapped or not).
        input_ids: (B, T) int64.
        attention_mask: (B, T) 1 on real tokens.
        temperature: the rollouts' temperature (0 = greedy: temperature-1 logprobs).
        top_p: the rollouts' nucleus mass.
        loss_mask: (B, T), nonzero on the tokens to score; None scores every token.
        entropy: a list that gets, appended, the (B, T) entropy in nats of the sampling
            distribution at each scored token (no gradient; 0 off ``loss_mask``).

    Returns:
        (B, T) float32; position 0 (no context) is 0, and so is every position off ``loss_mask``.
    """
    if loss_mask is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
        picked = token_logprobs(logits, input_ids[:, 1:], temperature, top_p)
        if entropy is not None:
            entropy.append(torch.nn.functional.pad(_entropy(logits, temperature, top_p), (1, 0)))
        return torch.nn.functional.pad(picked, (1, 0))
    scored = loss_mask[:, 1:] != 0  # (B, T-1): token t+1 is scored by the logits at position t
    keep = torch.nn.functional.pad(scored, (0, 1))  # (B, T): the positions whose logits are needed
    logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits  # (N, V)
    picked = token_logprobs(logits, input_ids[:, 1:][scored], temperature, top_p)  # (N,)
    out = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    where = torch.nn.functional.pad(scored, (1, 0))
    if entropy is not None:
        entropy.append(torch.zeros_like(out).masked_scatter(where, _entropy(logits, temperature, top_p)))
    return out.masked_scatter(where, picked)


def _entropy(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Entropy (nats) of the sampling distribution of each row of ``logits`` (..., V) -> (...)."""
    with torch.no_grad():
        logp = sampling_log_probs(logits.detach().float(), temperature, top_p)
        p = logp.exp()
        return -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1)


class Learner:
    """Trains a peft LoRA adapter (or every weight: ``adapter: none``) with GRPO from a
    :class:`GroupSource`, publishing each version to a bucket.

    Args:
        config: the learner's settings.
        policy: what the rollouts were sampled from (base model, sampling, staleness bound).
        source: the store (complete groups).
        bucket: where adapters are published and resumed from.
        claimer: a name for this learner's claims.
        on_refill: called with the number of groups a step still lacks before each refill claim
            (the sync job lets that many more groups start).
        should_stop: True once the learner is asked to stop (a step's refill then ends at once).
    """

    def __init__(self, config: LearnerConfig, policy: RolloutPolicy, source: GroupSource, bucket: AdapterBucket, claimer: str = "learner",
                 on_refill: Callable[[int], None] | None = None, should_stop: Callable[[], bool] | None = None,
                 ) -> None:
        self.config = config
        self.policy = policy
        self.source = source
        self.bucket = bucket
        self.claimer = claimer
        self.claims = StepClaimer(source, claimer, config.groups_per_step, config.claim_lease_s,
                                  config.dynamic_sampling, on_refill, should_stop)
        torch.manual_seed(0)
        base = load_causal_lm(self.model_spec)
        if config.gradient_checkpointing:  # non-reentrant: no input-grad hook needed under LoRA, and DDP-safe
            base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            base.config.use_cache = False
        self.weights: TrainedWeights = TRAINED_WEIGHTS[config.adapter](base, config)
        """What trains (``config.adapter``): a LoRA adapter, or every weight."""
        self.model = self.weights.model
        self.model.train()
        self.device = next(self.model.parameters()).device
        """Where the model is (``config.device``); batches are moved there."""
        params = self.weights.trainable()
        self.optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
        self.scheduler = make_schedule(config.lr_schedule, self.optimizer, config.warmup_steps, config.lr_decay_steps)
        self.ranks: RankGroup | None = None
        """The data-parallel group once :meth:`join_ranks` ran (None: one rank)."""
        self._forward: Any = self.model
        """What the micro-steps call: the model, or the model under DDP."""
        self.step = 0
        self.version = 0
        self._pending: list[str] = []
        self.resumed_step_row: dict[str, Any] | None = None
        """The step row (``StepMetrics`` as a dict, ``published_version``, ``t``) of the version
        :meth:`resume` loaded, when that version's meta.json has one."""
        self.recent_rewards: dict[int, float] = {}
        """Mean reward of the last :data:`RECENT_STEPS` steps that trained, by step (the model card's)."""

    @property
    def model_spec(self) -> ModelSpec:
        """The served base model, held in the learner's own dtype and on its device."""
        return self.policy.model.model_copy(update={"dtype": self.config.dtype, "device": self.config.device})

    def meta(self) -> dict[str, Any]:
        """What every published version records of how it was trained (``meta.json``)."""
        return {"config": self.config.model_dump(mode="json"), "policy": self.policy.model_dump(mode="json")}

    @property
    def pending_group_ids(self) -> list[str]:
        """Groups trained on since the last publish (not yet acknowledged)."""
        return list(self._pending)

    @property
    def loss_config(self) -> LossConfig:
        return LossConfig(self.config.eps_low, self.config.eps_high)

    async def resume(self) -> bool:
        """Loads the newest committed adapter that reads back, its optimiser state and step, and
        acknowledges the groups that version consumed. A version that does not load (truncated
        weights, bad meta, an optimiser state that is damaged, does not fit, or is an old pickle
        holding more than tensors) is skipped with a warning for the previous one, and left in
        the bucket. Returns False when nothing is published.

        Raises:
            BucketError: versions are published but none of them loads (the reasons listed).
        """
        skipped: list[str] = []
        for adapter in self.bucket.committed_newest_first():
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    local = self.bucket.fetch(adapter.version, Path(tmp))
                    optimizer_state, step = load_learner_state(local)
                    check_fits(optimizer_state, self.optimizer)
                    self.weights.load(local)
                self.optimizer.load_state_dict(optimizer_state)
                self.scheduler = make_schedule(self.config.lr_schedule, self.optimizer, self.config.warmup_steps,
                                               self.config.lr_decay_steps, done_steps=step)
            except Exception as exc:  # safetensors, peft and torch raise their own for bad files
                log.warning("not resuming from adapter v%d (%s); trying the previous committed version, "
                            "the files stay in the bucket", adapter.version, exc)
                skipped.append(f"v{adapter.version}: {exc}")
                continue
            self.step, self.version = step, adapter.version
            row = adapter.meta.get("step_row")
            self.resumed_step_row = row if isinstance(row, dict) and row.get("step") == step else None
            await self.source.ack_groups(list(adapter.meta.get("consumed_group_ids", [])), self.claimer)
            log.info("resumed from %s at step %d", adapter.url, self.step)
            return True
        committed = self.bucket.versions()
        if committed:
            raise BucketError(
                f"none of the committed adapters {committed} of run {self.bucket.run_id} in {self.bucket.root} "
                f"loads ({'; '.join(skipped) or 'see the warnings above'}): fix or move them, or start a new run id")
        return False

    def join_ranks(self, ranks: RankGroup) -> None:
        """Makes this learner one rank of a data-parallel group (every rank calls it once, rank
        0 after :meth:`resume`): rank 0's optimiser state, step and version reach every rank,
        and DDP broadcasts rank 0's weights.

        Raises:
            RankLostError: a rank is gone or silent past the timeout.
        """
        state = ranks.broadcast((self.optimizer.state_dict(), self.step, self.version) if ranks.rank == 0 else None)
        if ranks.rank != 0:
            self.optimizer.load_state_dict(state[0])
            self.step, self.version = state[1], state[2]
            self.scheduler = make_schedule(self.config.lr_schedule, self.optimizer, self.config.warmup_steps,
                                           self.config.lr_decay_steps, done_steps=self.step)
        self._forward = ranks.wrap(self.model)
        self.ranks = ranks

    def train_on(self, groups: list[list[Trajectory]]) -> StepMetrics:
        """One optimiser step on already repaired groups (rank 0 deals them to every rank).
        Returns its metrics.

        Raises:
            RankLostError: a data-parallel rank was lost (the step is failed).
        """
        batch = collate(groups, self.config.max_tokens)
        if self.ranks is not None:
            self.ranks.broadcast(batch)
        return self.train_batch(batch, len(groups))

    def train_batch(self, batch: TrainBatch, n_groups: int = 0) -> StepMetrics:
        """One optimiser step on this rank's share of ``batch`` (all of it on one rank): micro-
        batches normalised by the whole step's generated tokens, gradients summed over ranks,
        clipped, stepped; the schedule advances. Every rank calls it with the same batch.

        Raises:
            RankLostError: a data-parallel rank was lost (the step is failed).
        """
        t0 = time.monotonic()
        total = max(batch.n_generated_tokens, 1)
        world = self.ranks.world_size if self.ranks is not None else 1
        mine = shard_batch(batch, self.ranks.rank, world) if self.ranks is not None else batch
        self.optimizer.zero_grad(set_to_none=True)
        sums = [0.0] * 6  # loss, then token-weighted: masked, ratio, kl, entropy, kl_ref
        micros = mine.split(self.config.micro_batch_size)
        with self.ranks.guard() if self.ranks is not None else contextlib.nullcontext():
            self._accumulate(micros, total, world, sums)
        if self.ranks is not None:
            sums = self.ranks.all_sum(sums)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.weights.trainable(), self.config.max_grad_norm)
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return StepMetrics(
            self.step, sums[0], sums[1], sums[2], sums[3], batch.n_generated_tokens, n_groups,
            float(batch.rewards.mean()), duration_s=time.monotonic() - t0, grad_norm=float(grad_norm),
            learning_rate=lr, entropy=sums[4], kl_ref=sums[5] if self.config.kl_coef > 0 else None, world_size=world)

    def _accumulate(self, micros: list[TrainBatch], total: int, world: int, sums: list[float]) -> None:
        """Forward and backward of each micro-batch, adding its figures to ``sums``."""
        for i, micro in enumerate(micros):
            sync = self.ranks is None or i == len(micros) - 1  # DDP all-reduces in the last backward only
            with contextlib.nullcontext() if sync else self._forward.no_sync():
                out, ent, kl_ref = self._micro_step(micro, total, world)
            w = out.n_tokens / total
            for k, v in enumerate((float(out.loss.detach()), out.masked_fraction * w, out.mean_ratio * w,
                                   out.kl * w, ent * w, kl_ref * w)):
                sums[k] += v

    def _micro_step(self, micro: TrainBatch, total_tokens: int, world: int = 1) -> tuple[LossOutput, float, float]:
        """Forward and backward of one micro-batch; returns its loss, mean entropy and mean KL to
        the reference over its generated tokens (KL 0 when ``kl_coef`` is 0)."""
        micro = micro.to(self.device)
        entropy: list[torch.Tensor] = []
        logp = sequence_logprobs(self._forward, micro.input_ids, micro.attention_mask, self.policy.temperature,
                                 self.policy.top_p, loss_mask=micro.loss_mask, entropy=entropy)
        out = policy_loss(
            logp, micro.behaviour_logp, micro.advantages, micro.loss_mask,
            objective=self.config.objective, config=self.loss_config, n_tokens_total=total_tokens,
        )
        mask = micro.loss_mask.to(logp.dtype)
        count = max(out.n_tokens, 1)
        loss, kl_mean = out.loss, 0.0
        if self.config.kl_coef > 0:
            with torch.no_grad(), self.weights.reference() as reference:  # the base model
                ref = sequence_logprobs(reference, micro.input_ids, micro.attention_mask, self.policy.temperature,
                                        self.policy.top_p, loss_mask=micro.loss_mask)
            kl = reference_kl(logp, ref) * mask
            loss = loss + self.config.kl_coef * kl.sum() / float(total_tokens)
            kl_mean = float(kl.detach().sum()) / count
            out = LossOutput(loss, out.masked_fraction, out.mean_ratio, out.kl, out.n_tokens)
        (loss * world).backward()  # DDP averages the ranks' gradients; their sum is the step's
        return out, float((entropy[0] * mask).sum()) / count, kl_mean

    async def run_step(self) -> StepMetrics | None:
        """Claims groups (refilling past zero-variance ones), trains one step and publishes when due.
        None when no group is ready."""
        got = await self.claims.claim_step(self.version, self.policy.max_staleness)
        if got is None:
            return None
        rewards: dict[str, list[float]] = {}
        for c in got.claimed:
            for t in c.trajectories:
                if t.status.trains:
                    rewards.setdefault(c.task or t.env_id, []).append(t.reward)
        groups = got.trained
        # dropped groups are consumed all the same (acked at the publish); skipped ones are acked already
        self._pending.extend(got.trained_ids + got.dropped_ids)
        if not groups:  # nothing left to train on
            metrics = StepMetrics(self.step, 0.0, 0.0, 1.0, 0.0, 0, 0, 0.0, filter=got.filter,
                                  world_size=self.ranks.world_size if self.ranks is not None else 1)
        else:
            metrics = self.train_on(groups)
            metrics.filter = got.filter
        metrics.reward_by_task = {k: sum(v) / len(v) for k, v in sorted(rewards.items())}
        if groups:
            self._remember_reward(metrics.mean_reward)
        metrics.n_zero_variance_groups = len(got.zero_variance_ids)
        metrics.n_extra_claims, metrics.n_groups_short = got.n_extra_claims, got.n_groups_short
        log.info("step %d: %d groups trained, %d zero-variance (%s), %d dropped, %d extra claims, %d short",
                 self.step, len(groups), len(got.zero_variance_ids),
                 "skipped" if got.skipped_ids else "trained" if got.zero_variance_ids else "none",
                 len(got.dropped_ids), got.n_extra_claims, got.n_groups_short)
        if groups and self.step % self.config.publish_every == 0:
            metrics.published_version = await self.publish(metrics)
        return metrics

    def _remember_reward(self, reward: float) -> None:
        self.recent_rewards[self.step] = reward
        for old in sorted(self.recent_rewards)[:-RECENT_STEPS]:
            del self.recent_rewards[old]

    def save_shareable(self, folder: Path, version: int, note: str = "") -> None:
        """Saves the trained weights into ``folder`` as a folder another machine loads, with a
        model card (:mod:`gymfleet.trainer.model_card`): a PEFT folder naming the base model by
        its hub id (LoRA), or a transformers model folder (full fine-tuning)."""
        self.weights.save(folder, AdapterCard(self.bucket.run_id, version, self.step, hub_id(self.policy.model),
                                              self.meta(), dict(self.recent_rewards), note=note))

    async def publish(self, metrics: StepMetrics | None = None) -> int:
        """Commits adapter + optimiser state + consumed group ids, then acks those groups.

        The version is one past both this learner's and the bucket's newest committed one: after
        resuming from v1 because v2 is corrupt, the next publish is v3 (v2 stays, immutable).
        ``metrics`` (the step that made this version) go into its meta.json as ``step_row``, so a
        learner killed between this commit and its ``learner.jsonl`` row loses no row: the next
        start writes it from there (:attr:`resumed_step_row`).
        """
        version = max(self.version, self.bucket.newest_version()) + 1
        with tempfile.TemporaryDirectory() as tmp:
            self.save_shareable(Path(tmp), version)
            save_learner_state(self.optimizer, self.step, Path(tmp))
            meta = {"step": self.step, "consumed_group_ids": list(self._pending),
                    **self.meta(), "recent_rewards": dict(self.recent_rewards)}
            if metrics is not None:
                meta["step_row"] = {**asdict(metrics), "published_version": version, "t": time.time()}
            self.bucket.publish(version, Path(tmp), meta)
        self.version = version
        await self.source.ack_groups(self._pending, self.claimer)
        self._pending = []
        return version
