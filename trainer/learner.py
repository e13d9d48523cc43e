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

import logging
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch
from pydantic import Field, model_validator

from gymfleet.core.models import ModelSpec, hub_id, load_causal_lm
from gymfleet.core.records import Trajectory
from gymfleet.core.sampling import token_logprobs
from gymfleet.core.strict import StrictModel
from gymfleet.trainer.batch import GroupFilterStats, TrainBatch, collate
from gymfleet.trainer.bucket import AdapterBucket
from gymfleet.trainer.errors import BucketError
from gymfleet.trainer.learner_state import check_fits, load_learner_state, save_learner_state
from gymfleet.trainer.loss import LossConfig, policy_loss
from gymfleet.trainer.model_card import AdapterCard, make_shareable
from gymfleet.trainer.rollout_policy import RolloutPolicy
from gymfleet.trainer.signal import DynamicSamplingConfig, GroupSource, StepClaimer

log = logging.getLogger(__name__)

RECENT_STEPS = 10
"""Steps whose mean reward a published version's model card lists."""


class LearnerConfig(StrictModel):
    """The learner's own settings (written into every published adapter's meta.json).

    What it shares with the rollouts (base model, sampling, staleness bound) is not here: the run
    owns it and passes it as a :class:`~gymfleet.trainer.rollout_policy.RolloutPolicy`.
    """

    dtype: str = "float32"
    """torch dtype the learner holds the base model in (the engines may serve another)."""
    device: str = "auto"
    """Where the learner trains: ``auto`` (a GPU when there is one), ``cpu``, ``cuda:0``..."""
    lora_rank: int = Field(8, ge=1)
    """LoRA rank r (rank 1 works)."""
    lora_alpha: float = 16.0
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA input."""
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Module names LoRA wraps."""
    learning_rate: float = 1e-4
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient norm clip."""
    objective: str = "dsis"
    """Policy objective, a key of trainer.loss.OBJECTIVES: dsis, ppo_clip or none."""
    eps_low: float = 0.2
    """Lower edge of the ratio band: tokens with ratio <= 1 - eps_low are masked (dsis)."""
    eps_high: float = 0.28
    """Upper edge: tokens with ratio >= 1 + eps_high are masked (dsis)."""
    groups_per_step: int = Field(4, ge=1)
    """Groups per optimiser step (groups with reward variance, when dynamic sampling is on)."""
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig)
    """Refill each step with groups whose rewards vary, as DAPO's dynamic sampling does
    (arXiv:2503.14476, §3.2); zero-variance groups are acknowledged untrained and counted."""
    micro_batch_size: int = Field(4, ge=1)
    """Sequences per forward/backward pass."""
    max_tokens: int = Field(2048, ge=8)
    """Sequences are truncated to this many tokens."""
    publish_every: int = Field(1, ge=1)
    """Publish (and checkpoint) the adapter every this many steps."""
    claim_lease_s: float = 900.0
    """Seconds a claim holds before the store hands the group to another learner; must exceed
    ``publish_every`` steps."""

    @model_validator(mode="before")
    @classmethod
    def _run_owned(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, owner in RUN_OWNED.items():
                if key in data:
                    raise ValueError(f"learner.{key} is not a learner setting: the run owns it ({owner}); "
                                     f"drop learner.{key} and set {owner}")
        return data


RUN_OWNED = {"model": "policy.model (the model the engines serve)",
             "temperature": "tasks[].sampling.temperature", "top_p": "tasks[].sampling.top_p",
             "max_staleness": "the top-level max_staleness"}
"""Keys an older learner config carried that the run now owns, and where they are set."""


@dataclass
class StepMetrics:
    """What one learner step did (one row of the run report)."""

    step: int
    loss: float
    masked_fraction: float
    mean_ratio: float
    kl: float
    n_tokens: int
    n_groups: int
    mean_reward: float
    filter: GroupFilterStats = field(default_factory=GroupFilterStats)
    duration_s: float = 0.0
    published_version: int | None = None
    reward_by_task: dict[str, float] = field(default_factory=dict)
    """Mean reward of the trainable samples claimed this step, per task."""
    n_zero_variance_groups: int = 0
    """Groups claimed this step whose rewards were all equal (no gradient); with dynamic sampling
    they were acknowledged untrained."""
    n_extra_claims: int = 0
    """Claims beyond the step's first that returned groups (the refill)."""
    n_groups_short: int = 0
    """Groups with variance the step lacked when the refill gave up (0: a full step)."""


def sequence_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0,
    loss_mask: torch.Tensor | None = None,
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

    Returns:
        (B, T) float32; position 0 (no context) is 0, and so is every position off ``loss_mask``.
    """
    if loss_mask is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
        picked = token_logprobs(logits, input_ids[:, 1:], temperature, top_p)
        return torch.nn.functional.pad(picked, (1, 0))
    scored = loss_mask[:, 1:] != 0  # (B, T-1): token t+1 is scored by the logits at position t
    keep = torch.nn.functional.pad(scored, (0, 1))  # (B, T): the positions whose logits are needed
    logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits  # (N, V)
    picked = token_logprobs(logits, input_ids[:, 1:][scored], temperature, top_p)  # (N,)
    out = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    return out.masked_scatter(torch.nn.functional.pad(scored, (1, 0)), picked)


class Learner:
    """Trains a peft LoRA adapter with GRPO from a :class:`GroupSource`, publishing to a bucket.

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
        from peft import LoraConfig, get_peft_model

        self.config = config
        self.policy = policy
        self.source = source
        self.bucket = bucket
        self.claimer = claimer
        self.claims = StepClaimer(source, claimer, config.groups_per_step, config.claim_lease_s,
                                  config.dynamic_sampling, on_refill, should_stop)
        torch.manual_seed(0)
        base = load_causal_lm(self.model_spec)
        lora = LoraConfig(
            r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
            target_modules=config.target_modules, task_type="CAUSAL_LM",
        )
        self.model = get_peft_model(base, lora)
        self.model.train()
        self.device = next(self.model.parameters()).device
        """Where the model is (``config.device``); batches are moved there."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
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
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        skipped: list[str] = []
        for adapter in self.bucket.committed_newest_first():
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    local = self.bucket.fetch(adapter.version, Path(tmp))
                    weights = load_file(str(local / "adapter_model.safetensors"))
                    optimizer_state, step = load_learner_state(local)
                check_fits(optimizer_state, self.optimizer)
                set_peft_model_state_dict(self.model, weights)
                self.optimizer.load_state_dict(optimizer_state)
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

    def train_on(self, groups: list[list[Trajectory]]) -> StepMetrics:
        """One optimiser step on already repaired groups. Returns its metrics."""
        t0 = time.monotonic()
        batch = collate(groups, self.config.max_tokens)
        total = max(batch.n_generated_tokens, 1)
        self.optimizer.zero_grad(set_to_none=True)
        sums = {"loss": 0.0, "masked": 0.0, "ratio": 0.0, "kl": 0.0}
        for micro in batch.split(self.config.micro_batch_size):
            out = self._micro_step(micro, total)
            weight = out.n_tokens / total
            sums["loss"] += float(out.loss.detach())
            sums["masked"] += out.masked_fraction * weight
            sums["ratio"] += out.mean_ratio * weight
            sums["kl"] += out.kl * weight
        torch.nn.utils.clip_grad_norm_(
            [p for p in self.model.parameters() if p.requires_grad], self.config.max_grad_norm
        )
        self.optimizer.step()
        self.step += 1
        return StepMetrics(
            self.step, sums["loss"], sums["masked"], sums["ratio"], sums["kl"], batch.n_generated_tokens,
            len(groups), float(batch.rewards.mean()), duration_s=time.monotonic() - t0,
        )

    def _micro_step(self, micro: TrainBatch, total_tokens: int):
        micro = micro.to(self.device)
        logp = sequence_logprobs(self.model, micro.input_ids, micro.attention_mask, self.policy.temperature,
                                 self.policy.top_p, loss_mask=micro.loss_mask)
        out = policy_loss(
            logp, micro.behaviour_logp, micro.advantages, micro.loss_mask,
            objective=self.config.objective, config=self.loss_config, n_tokens_total=total_tokens,
        )
        out.loss.backward()
        return out

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
            metrics = StepMetrics(self.step, 0.0, 0.0, 1.0, 0.0, 0, 0, 0.0, filter=got.filter)
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
        """Saves the adapter into ``folder`` as a PEFT folder another machine loads: the base
        model named by its hub id, and a model card (:mod:`gymfleet.trainer.model_card`)."""
        self.model.save_pretrained(folder)
        make_shareable(folder, AdapterCard(
            self.bucket.run_id, version, self.step, hub_id(self.policy.model), self.meta(),
            dict(self.recent_rewards), note=note))

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
