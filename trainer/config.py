"""TrainConfig: one YAML for a training run (collection, learner, bucket, mode, budget, report).

The file is a :class:`~gymfleet.orchestrator.config.RunConfig` (the collection, exactly as
``gymfleet collect`` reads it) plus the training keys ``learner``, ``bucket``, ``mode``,
``budget``, ``report_dir`` and ``watch_interval_s``; ``KEY.PATH=VALUE`` overrides apply to the
whole document. Tasks cycle over their instances for as long as the budget lasts unless they
set ``passes`` themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gymfleet.orchestrator.config import RunConfig, read_config_document, validation_problems
from gymfleet.orchestrator.errors import ConfigError
from gymfleet.trainer.learner import LearnerConfig

TRAIN_KEYS = ("learner", "bucket", "mode", "budget", "report_dir", "watch_interval_s", "learner_threads")


class BudgetConfig(BaseModel):
    """When a training run ends: whichever limit is reached first."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int | None = Field(20, ge=1)
    """Learner optimiser steps (counted across restarts: a resumed run continues to this)."""
    max_wall_s: float | None = Field(None, gt=0)
    """Seconds of this start of the run."""

    @model_validator(mode="after")
    def _some_limit(self) -> BudgetConfig:
        if self.max_steps is None and self.max_wall_s is None:
            raise ValueError("set budget.max_steps or budget.max_wall_s (or both)")
        return self


class TrainConfig(BaseModel):
    """A whole training run."""

    model_config = ConfigDict(extra="forbid")

    run: RunConfig
    """The collection: tasks, concurrency, staleness gate, policy, store."""
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    """The learner; its temperature and top_p are taken from the tasks' sampling."""
    bucket: str = "runs/{run_id}/bucket"
    """fsspec URL of the adapter bucket; ``{run_id}`` is filled in."""
    mode: Literal["async", "sync"] = "async"
    """async: generation and training overlap (staleness-gated); sync: lock-step baseline."""
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    report_dir: str = "runs/{run_id}/report"
    """Where report.json and the PNG plots go; ``{run_id}`` is filled in."""
    watch_interval_s: float = Field(0.5, gt=0)
    """Seconds between looks at the bucket for a new adapter version."""

    learner_threads: int | None = Field(None, ge=1)
    """torch threads of the learner process; None keeps torch's default."""

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        self.bucket = self.bucket.format(run_id=self.run.run_id)
        self.report_dir = self.report_dir.format(run_id=self.run.run_id)
        pairs = {(t.sampling.temperature, t.sampling.top_p) for t in self.run.tasks}
        if len(pairs) > 1:
            raise ValueError(
                f"tasks sample with different (temperature, top_p) {sorted(pairs)}: the learner computes "
                "logprobs under one sampling distribution; give every task the same sampling.temperature/top_p"
            )
        (temperature, top_p), = pairs
        self.learner = self.learner.model_copy(update={"temperature": temperature, "top_p": top_p})
        if self.run.max_staleness is None:
            self.run.max_staleness = self.learner.max_staleness
        # the start-up parity check scores replicas in the learner's own dtype
        self.run.policy.parity.dtype = self.learner.model.dtype
        return self


def train_config_from_dict(data: dict[str, Any], origin: str = "train config") -> TrainConfig:
    """Validates a training config document (see the module docstring).

    Raises:
        ConfigError: a field does not validate (the message lists each bad field).
    """
    data = dict(data)
    train = {k: data.pop(k) for k in TRAIN_KEYS if k in data}
    for task in data.get("tasks") or []:
        if isinstance(task, dict):
            task.setdefault("passes", None)
    try:
        return TrainConfig.model_validate({"run": data, **train})
    except ValidationError as exc:
        raise ConfigError(f"{origin}: {validation_problems(exc)}") from exc


def load_train_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Reads a training config from YAML and applies ``KEY.PATH=VALUE`` overrides.

    The run id defaults to the file's stem.

    Raises:
        ConfigError: unreadable file, bad YAML, a bad override or a field that does not validate.
    """
    data = read_config_document(path, overrides, "train config")
    return train_config_from_dict(data, f"train config {path}")
