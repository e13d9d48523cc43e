"""LearnerConfig: the learner's own settings (what it shares with the rollouts is the run's).

Each field is documented under it; docs/train.md lists them with their defaults.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from gymfleet.core.strict import StrictModel
from gymfleet.trainer.signal import DynamicSamplingConfig


class LearnerConfig(StrictModel):
    """The learner's own settings (written into every published adapter's meta.json).

    What it shares with the rollouts (base model, sampling, staleness bound) is not here: the run
    owns it and passes it as a :class:`~gymfleet.trainer.rollout_policy.RolloutPolicy`.
    """

    dtype: str = "float32"
    """torch dtype the learner holds the base model in (the engines may serve another)."""
    device: str = "auto"
    """Where the learner trains: ``auto`` (a GPU when there is one), ``cpu``, ``cuda:0``..."""
    adapter: Literal["lora", "none"] = "lora"
    """What trains, a key of trainer.weights.TRAINED_WEIGHTS: ``lora``, a LoRA adapter on the
    frozen base (the lora_* fields and ``target_modules``); ``none``, full fine-tuning of every
    weight (TRL without ``peft_config``), each version publishing the whole model as safetensors
    (SmolLM2-135M in float32: 538 MB a version), which the engines load in place of their weights.
    The lora_* fields and ``target_modules`` are then unused."""
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
    lr_schedule: str = "constant"
    """Learning-rate schedule after the warm-up, a key of trainer.schedule.SCHEDULES: constant,
    linear (to 0 at ``lr_decay_steps``) or cosine (to 0 at ``lr_decay_steps``); transformers'
    schedules, as TRL's ``lr_scheduler_type``."""
    warmup_steps: int = Field(0, ge=0)
    """Optimiser steps of linear warm-up from 0 to ``learning_rate`` (TRL ``warmup_steps``, verl
    ``lr_warmup_steps``); the first warm-up update runs at learning rate 0, as in transformers."""
    lr_decay_steps: int | None = Field(None, ge=1)
    """Step at which linear and cosine reach 0; None: the run's ``budget.max_steps``."""
    kl_coef: float = Field(0.0, ge=0)
    """beta of the KL penalty to the reference policy, the base model (the adapter disabled for
    the reference pass: no second copy), with GRPO's k3 estimator (trainer.loss.reference_kl);
    TRL's ``beta``, verl's ``kl_loss_coef``. 0: no reference pass, ``kl_ref`` not reported."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them
    (transformers' gradient checkpointing, non-reentrant): less peak memory on long sequences,
    about one more forward pass of time."""
    world_size: int = Field(1, ge=1)
    """Data-parallel ranks of the learner (torch DDP): rank 0 claims, publishes and acks; each
    step's sequences are dealt over the ranks and their gradients all-reduced. Locally the
    ranks are processes on this machine; each gets the learner's torch threads."""
    dist_backend: str = "auto"
    """torch.distributed backend of the ranks: auto (nccl on CUDA, gloo on the CPU), gloo or nccl."""
    dist_timeout_s: float = Field(300.0, gt=0)
    """Seconds a collective (a step's broadcast, the gradient all-reduce) waits for a rank
    before the step fails (a rank that died is usually noticed at once: its sockets close)."""
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

    @model_validator(mode="after")
    def _known_schedule(self) -> LearnerConfig:
        from gymfleet.trainer.schedule import SCHEDULES

        if self.lr_schedule not in SCHEDULES:
            raise ValueError(f"learner.lr_schedule {self.lr_schedule!r} is not one of {', '.join(SCHEDULES)}")
        if self.dist_backend not in ("auto", "gloo", "nccl"):
            raise ValueError(f"learner.dist_backend {self.dist_backend!r} is not one of auto, gloo, nccl")
        return self


RUN_OWNED = {"model": "policy.model (the model the engines serve)",
             "temperature": "sampling.temperature", "top_p": "sampling.top_p",
             "max_staleness": "the top-level max_staleness"}
"""Keys an older learner config carried that the run now owns, and where they are set."""
