"""The supervised warm start: the learner's LoRA adapter trained by cross-entropy on demonstrations,
then published as the run's first adapter version, from which GRPO resumes.

Demonstrations are token-exact gold episodes (``gymfleet.orchestrator.teacher_forcing``): loss mask 1 on
the assistant tokens, behaviour logprobs 0 and versions -1 (nothing was sampled), so only their
token ids and loss mask are read here. The model, its LoRA wrapping and the collation are the
GRPO learner's (:class:`~gymfleet.trainer.learner.Learner`, :func:`~gymfleet.trainer.batch.collate`),
so the published adapter and optimiser state are exactly what :meth:`Learner.resume` loads.

The published version is 1 with ``step`` 0: warm-start updates are not GRPO steps and do not
spend the run's step budget. Its optimiser state is a fresh AdamW at the GRPO learning rate
(the SFT optimiser's moments, from another loss and learning rate, are not carried over).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from pydantic import Field

from gymfleet.core.records import ClaimedGroup, Trajectory
from gymfleet.core.strict import StrictModel
from gymfleet.trainer.batch import TrainBatch, collate
from gymfleet.trainer.bucket import AdapterBucket
from gymfleet.core.errors import TrainError
from gymfleet.trainer.learner import Learner, LearnerConfig, sequence_logprobs
from gymfleet.trainer.rollout_policy import RolloutPolicy
from gymfleet.trainer.learner_state import save_learner_state
from gymfleet.trainer.loss import sft_loss

WARM_START_VERSION = 1
"""The version a warm start publishes: the run's first."""


class SFTConfig(StrictModel):
    """How the adapter is trained on demonstrations."""

    epochs: int = Field(3, ge=1)
    """Passes over the demonstrations."""
    learning_rate: float = Field(1e-3, gt=0)
    """AdamW learning rate of the warm start (GRPO keeps ``learner.learning_rate``)."""
    batch_size: int = Field(8, ge=1)
    """Demonstrations per optimiser step (micro-batched by ``learner.micro_batch_size``)."""
    seed: int = 0
    """Seed of the order the demonstrations are visited in, each epoch."""


@dataclass
class SFTReport:
    """What a warm start did.

    Attributes:
        n_demonstrations: demonstrations trained on.
        n_target_tokens: loss-mask tokens among them (truncated to ``learner.max_tokens``).
        initial_loss: mean NLL per target token before training (nats).
        epoch_losses: mean NLL per target token after each epoch (nats), over every demonstration.
        version: the adapter version published (None until published).
    """

    n_demonstrations: int
    n_target_tokens: int
    initial_loss: float
    epoch_losses: list[float] = field(default_factory=list)
    version: int | None = None


class _NoGroups:
    """The GroupSource of a warm start: it trains on demonstrations, never on claimed groups."""

    async def claim_groups(self, n: int, claimer: str, lease_s: float) -> list[ClaimedGroup]:
        return []

    async def ack_groups(self, group_ids: list[str], claimer: str) -> None:
        return None


def _batch_loss(learner: Learner, batch: TrainBatch, train: bool) -> tuple[float, int]:
    """Sum of NLL over ``batch``'s target tokens (backpropagated when ``train``) and their count."""
    total = max(batch.n_generated_tokens, 1)
    loss_sum = 0.0
    for micro in batch.split(learner.config.micro_batch_size):
        micro = micro.to(learner.device)
        with torch.set_grad_enabled(train):
            logp = sequence_logprobs(learner.model, micro.input_ids, micro.attention_mask, 1.0, 1.0,
                                     loss_mask=micro.loss_mask)
            loss = sft_loss(logp, micro.loss_mask, n_tokens_total=total)
        if train:
            loss.backward()
        loss_sum += float(loss.detach()) * total
    return loss_sum, batch.n_generated_tokens


def demonstration_loss(learner: Learner, demos: Sequence[Trajectory]) -> float:
    """Mean NLL per target token of ``demos`` under the learner's model (nats), without gradient."""
    loss_sum, n = 0.0, 0
    for i in range(0, len(demos), learner.config.micro_batch_size):
        part = demos[i : i + learner.config.micro_batch_size]
        s, k = _batch_loss(learner, collate([[d] for d in part], learner.config.max_tokens), train=False)
        loss_sum, n = loss_sum + s, n + k
    return loss_sum / max(n, 1)


def train_on_demonstrations(learner: Learner, demos: Sequence[Trajectory], config: SFTConfig,
                             on_epoch: Callable[[int, float], None] | None = None) -> SFTReport:
    """``config.epochs`` passes of supervised training of ``learner``'s adapter on ``demos``.

    ``on_epoch(epoch, loss)`` is called with the loss over every demonstration before training
    (epoch 0) and after each epoch (mean NLL per target token, nats), as it is known: a warm
    start takes minutes on a CPU, and people want to see it move.

    Uses its own AdamW at ``config.learning_rate`` over the LoRA parameters, gradient clipped at
    ``learner.config.max_grad_norm``; ``learner.optimizer`` (GRPO's) is left untouched.

    Raises:
        TrainError: no demonstration has a loss-mask token.
    """
    demos = [d for d in demos if d.n_generated_tokens > 0]
    if not demos:
        raise TrainError("no demonstration has an assistant token to learn from: record demonstrations first "
                         "(`gymfleet sft CONFIG` records them), and check that the gold policies earn reward")
    params = [p for p in learner.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=learner.config.weight_decay)
    order = torch.Generator().manual_seed(config.seed)
    n_tokens = int(collate([[d] for d in demos], learner.config.max_tokens).loss_mask.sum().item())
    report = SFTReport(len(demos), n_tokens, demonstration_loss(learner, demos))
    say = on_epoch or (lambda epoch, loss: None)
    say(0, report.initial_loss)
    for epoch in range(1, config.epochs + 1):
        shuffled = [demos[i] for i in torch.randperm(len(demos), generator=order).tolist()]
        for i in range(0, len(shuffled), config.batch_size):
            optimizer.zero_grad(set_to_none=True)
            _batch_loss(learner, collate([[d] for d in shuffled[i : i + config.batch_size]],
                                         learner.config.max_tokens), train=True)
            torch.nn.utils.clip_grad_norm_(params, learner.config.max_grad_norm)
            optimizer.step()
        report.epoch_losses.append(demonstration_loss(learner, demos))
        say(epoch, report.epoch_losses[-1])
    optimizer.zero_grad(set_to_none=True)
    return report


def _refuse_if_published(bucket: AdapterBucket) -> None:
    committed = bucket.versions()
    if committed:
        raise TrainError(
            f"the bucket {bucket.root} already holds versions {committed} of run {bucket.run_id}: "
            "a warm start publishes a run's first version; use a new run id (or bucket), or train from there")


def publish_warm_start(learner: Learner, report: SFTReport, meta: dict[str, object] | None = None) -> int:
    """Publishes the learner's adapter as the run's first version (step 0, fresh optimiser state).

    Args:
        learner: the trained learner (its bucket is the run's).
        report: written into the version's ``meta.json`` under ``warm_start``.
        meta: more keys for ``meta.json`` (e.g. the demonstrations' run id).

    Returns:
        The version published (1).

    Raises:
        TrainError: the bucket already holds a version (the run has started: the warm start is
            for a new run only).
        BucketError: the bucket cannot be written.
    """
    _refuse_if_published(learner.bucket)
    with tempfile.TemporaryDirectory() as tmp:
        learner.save_shareable(Path(tmp), WARM_START_VERSION, note=(
            f"Warm start: supervised fine-tuning on {report.n_demonstrations} gold demonstrations "
            f"(loss per epoch {', '.join(f'{loss:.4f}' for loss in report.epoch_losses)})."))
        save_learner_state(learner.optimizer, learner.step, Path(tmp))
        learner.bucket.publish(WARM_START_VERSION, Path(tmp), {
            "step": learner.step, "consumed_group_ids": [], **learner.meta(),
            **(meta or {}), "warm_start": asdict(report) | {"version": WARM_START_VERSION},
        })
    learner.version = report.version = WARM_START_VERSION
    return WARM_START_VERSION


def warm_start(learner_config: LearnerConfig, policy: RolloutPolicy, bucket: AdapterBucket,
               demos: Sequence[Trajectory], config: SFTConfig, meta: dict[str, object] | None = None,
               on_epoch: Callable[[int, float], None] | None = None) -> SFTReport:
    """Loads the learner's model and LoRA, trains on ``demos`` (``on_epoch``: see
    :func:`train_on_demonstrations`) and publishes version 1.

    Blocking (seconds to minutes of torch): call it from a thread in an event loop.

    Raises:
        TrainError: no usable demonstration, or the bucket already holds a version.
        BucketError: the bucket cannot be written.
    """
    _refuse_if_published(bucket)  # before loading any weights
    learner = Learner(learner_config, policy, _NoGroups(), bucket, claimer="warm-start")
    report = train_on_demonstrations(learner, demos, config, on_epoch)
    publish_warm_start(learner, report, meta)
    return report
