"""TrainConfig: one YAML for a training run (collection, learner, bucket, mode, budget, report).

The file is a :class:`~gymfleet.orchestrator.config.RunConfig` (the collection, exactly as
``gymfleet collect`` reads it) plus the training keys ``learner``, ``bucket``, ``mode``,
``budget``, ``report_dir``, ``watch_interval_s``, ``warmstart`` and ``heldout``; ``KEY.PATH=VALUE``
overrides apply to the whole document. Tasks cycle over their instances for as long as the
budget lasts unless they set ``passes`` themselves.

What the learner must share with the rollouts has one owner, the run: the base model is
``policy.model`` (the model the engines serve), the sampling is the run's ``sampling:`` block,
and the staleness bound is the top-level ``max_staleness`` (default
:data:`~gymfleet.run.defaults.DEFAULT_MAX_STALENESS` in a training run).
:meth:`TrainConfig.rollout_policy` hands them to the learner; the learner's section has no such
keys (setting one is refused, naming where it is set). Defaults that depend on other keys are
resolved before validation (:mod:`gymfleet.run.defaults`); nothing is rewritten after it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from gymfleet.core.errors import ConfigError
from gymfleet.core.strict import StrictModel, unknown_key_message, validation_problems
from gymfleet.orchestrator import RunConfig, fill_run_id, read_config_document
from gymfleet.run.defaults import DEFAULT_MAX_STALENESS, resolved_learner, resolved_run  # noqa: F401 (re-exported)
from gymfleet.run.threads import learner_environment, split_threads, usable_cpus
from gymfleet.run.trackers import ReportTo
from gymfleet.trainer import LearnerConfig, RolloutPolicy, SFTConfig, WorkerArgs

class BudgetConfig(StrictModel):
    """When a training run ends: whichever limit is reached first."""

    max_steps: int | None = Field(20, ge=1)
    """Learner optimiser steps (counted across restarts: a resumed run continues to this)."""
    max_wall_s: float | None = Field(None, gt=0)
    """Seconds of this start of the run."""

    @model_validator(mode="after")
    def _some_limit(self) -> BudgetConfig:
        if self.max_steps is None and self.max_wall_s is None:
            raise ValueError("set budget.max_steps or budget.max_wall_s (or both)")
        return self


class ClusterConfig(StrictModel):
    """Where each role of a training run goes on a Ray cluster (``train --cluster``)."""

    shards: int = Field(2, ge=1)
    """Orchestrator shards (each a ``collect`` of the run with its own env resources and replicas)."""
    shard_resources: dict[str, float] = Field(default_factory=lambda: {"sandbox": 1.0})
    """Ray resources each shard requests: custom resources the env nodes offer."""
    shard_cpus: float = Field(1.0, ge=0)
    """CPUs each shard requests."""
    learner_resources: dict[str, float] = Field(default_factory=lambda: {"trainer": 1.0})
    """Ray resources the learner requests."""
    learner_cpus: float = Field(1.0, ge=0)
    """CPUs the learner requests per data-parallel rank (``learner.world_size`` ranks, on its node)."""
    learner_gpus: float = Field(0.0, ge=0)
    """GPUs the learner requests per data-parallel rank (0: it trains on the CPU)."""
    replicas_per_shard: int = Field(0, ge=0)
    """Embedded inference replicas each shard gets as Ray actors of their own (``gymfleet serve``'s
    app, on nodes offering ``replica_resources``), reached over HTTP; 0: each shard runs
    ``policy.engines`` in its own process, as ``collect`` does."""
    replica_resources: dict[str, float] = Field(default_factory=lambda: {"inference": 1.0})
    """Ray resources each replica requests: custom resources the inference nodes offer."""
    replica_cpus: float = Field(1.0, ge=0)
    """CPUs each replica requests (its torch threads, at least 1)."""
    replica_gpus: float = Field(0.0, ge=0)
    """GPUs each replica requests (0: it serves on the CPU; with one, ``model.device: auto``
    puts it on the GPU)."""
    replica_port: int = Field(0, ge=0, le=65535)
    """First TCP port of the replicas (replica ``j`` listens on ``replica_port + j``, so one Ray
    restarts on the same node comes back at the same URL); 0: any free port."""
    max_restarts: int = Field(3, ge=0)
    """Restarts of a failed actor (Ray's ``max_restarts``); its ``run`` is retried after each."""
    stop_wait_s: float = Field(60.0, gt=0)
    """At the end, seconds the launcher waits for the shards to stop (abort and requeue their
    rollouts) before killing them; a shard whose node died is waited for this long too."""


class AdapterLoadConfig(StrictModel):
    """How the job hot-loads each published adapter version into the engines.

    A version that fails every attempt is skipped: the engines keep serving the previous one,
    rollouts keep being stamped with the version they actually sampled, the report lists the
    failure, and the next published version is tried.
    """

    attempts: int = Field(default=2, ge=1)
    """Tries per version (1: no retry)."""
    retry_wait_s: float = Field(default=5.0, ge=0)
    """Seconds between two tries."""
    timeout_s: float | None = Field(default=300.0, gt=0)
    """Limit of one try in seconds, whatever the gateway does (the router's own per-replica limit is
    ``policy.router.adapter_timeout_s``); None: the gateway's limit only."""


class WarmStartConfig(SFTConfig):
    """The warm start from demonstrations (docs/train.md, Warm start): gold-policy episodes
    recorded through the gateway, supervised training of the adapter on them, published as the
    run's first version. Also ``epochs``, ``learning_rate``, ``batch_size`` and ``seed`` (the
    supervised training's, documented on :class:`~gymfleet.trainer.SFTConfig`)."""

    enabled: bool = False
    """``gymfleet train`` runs the warm start before its learner starts (skipped when the bucket
    already holds a version, i.e. on resume). ``gymfleet sft`` runs it whatever this says."""
    episodes_per_instance: int = Field(1, ge=1)
    """Gold episodes recorded per task instance."""
    max_instances_per_task: int | None = Field(None, ge=1)
    """Instances per task that get demonstrations (the first ones of the task's list); None: all."""


class HeldOutConfig(StrictModel):
    """Held-out evaluation of the run's policies (docs/train.md, Held-out evaluation).

    Each task named in ``instances`` is evaluated on those instance ids, which the training tasks
    never run (they are added to the task's ``exclude_instances``). Every policy is scored with
    the same rollout ids and sampling seeds, so the comparison of base, warm start and final
    adapter is paired.
    """

    enabled: bool = False
    """``gymfleet train`` evaluates the policies that exist (base model, warm-start version, final
    version) on the held-out instances at the end of the run and writes the report's
    ``evaluation`` section. ``gymfleet eval heldout`` runs whatever this says."""
    instances: dict[str, list[str]] = Field(default_factory=dict)
    """Held-out instance ids per task name (a task left out here is not evaluated)."""
    samples_per_instance: int = Field(2, ge=1)
    """Rollouts per held-out instance and policy (n = instances x samples_per_instance)."""
    seed: int = 0
    """Sampling seed base of the evaluation rollouts (the same for every policy: paired)."""
    pass_threshold: float = 1.0
    """A rollout passes when its reward is >= this (pass@1 is the fraction that pass)."""
    base_first: bool = False
    """Evaluate the base model before the warm start and the learner start (costs time up front;
    off: it is evaluated at the end with the others, on the same seeds, hence the same scores)."""
    max_in_flight: int = Field(4, ge=1)
    """Evaluation rollouts at once."""


class TrainConfig(StrictModel):
    """A whole training run."""

    run: RunConfig
    """The collection: tasks, concurrency, staleness gate, policy, store."""
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    """The learner's own settings; its base model, sampling and staleness bound are the run's
    (:meth:`rollout_policy`)."""
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
    """torch intra-op threads of the learner process; None: half the usable CPUs (at least 1) in
    async mode, every usable CPU in sync mode (the learner and the engines take turns there).
    Resolved when the config is read (:mod:`gymfleet.run.threads`)."""
    engine_threads: int | None = Field(default=None, ge=1)
    """torch intra-op threads of the in-process engines (``kind: transformers``, including the
    default embedded one) whose own ``n_threads`` is unset; None: the CPUs the learner leaves (at
    least 1) in async mode, every usable CPU in sync mode. Resolved into each such engine when the
    config is read."""
    adapter_load: AdapterLoadConfig = Field(default_factory=AdapterLoadConfig)
    """Retries of an adapter hot-load that fails or times out, before the version is skipped."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    """Where the roles go with ``gymfleet train --cluster`` (unused on one machine)."""
    warmstart: WarmStartConfig = Field(default_factory=WarmStartConfig)
    """The warm start from demonstrations (``gymfleet sft``; before ``train`` when enabled)."""
    heldout: HeldOutConfig = Field(default_factory=HeldOutConfig)
    """Held-out evaluation of the base model, the warm-start and the final adapter."""
    report_to: ReportTo = Field(default_factory=list)
    """Experiment trackers that get the run's metrics.jsonl and learner.jsonl records and the
    held-out table: ``tensorboard`` (``<report_dir>/tensorboard``), ``wandb`` (offline,
    ``<report_dir>/wandb``); a list or ``"tensorboard,wandb"`` (docs/train.md, Experiment tracking)."""

    def worker_args(self, report_dir: str | None = None) -> WorkerArgs:
        """What the learner's loop (:func:`gymfleet.trainer.learn`) needs of this run; every step
        trains a whole step's worth of groups (``min_groups``), in both modes.

        Args:
            report_dir: where ``learner.jsonl`` goes (default ``report_dir``).
        """
        return WorkerArgs(
            learner=self.learner, policy=self.rollout_policy(), store_url=self.run.store, run_id=self.run.run_id,
            bucket_url=self.bucket, report_dir=report_dir or self.report_dir, max_steps=self.budget.max_steps,
            min_groups=self.learner.groups_per_step, n_threads=self.learner_threads,
            environment=learner_environment(self.mode),
        )

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, data: object) -> object:
        """Defaults that depend on other keys, resolved into new records before validation
        (:mod:`gymfleet.run.defaults`); a contradiction is refused in one line."""
        if not isinstance(data, dict) or "run" not in data:
            return data
        threads = (data.get("learner_threads"), data.get("engine_threads"))
        mode, bucket, report_dir = (data.get("mode", "async"), data.get("bucket", cls.model_fields["bucket"].default),
                                    data.get("report_dir", cls.model_fields["report_dir"].default))
        if (mode not in ("async", "sync") or not all(n is None or (isinstance(n, int) and n >= 1) for n in threads)
                or not isinstance(bucket, str) or not isinstance(report_dir, str)):
            return data  # the field validation that follows names the bad key
        try:
            run = RunConfig.model_validate(data["run"])  # an instance is taken as is
            learner = LearnerConfig.model_validate(data.get("learner", {}))
            budget = BudgetConfig.model_validate(data.get("budget", {}))
            heldout = HeldOutConfig.model_validate(data.get("heldout", {}))
        except ValidationError:
            return data  # as above, with each bad key's full path
        plan = split_threads(usable_cpus(), *threads, mode)
        return {**data, "run": resolved_run(run, learner, plan, heldout.instances),
                "learner": resolved_learner(learner, budget.max_steps),
                "bucket": fill_run_id(bucket, run.run_id), "report_dir": fill_run_id(report_dir, run.run_id),
                "learner_threads": plan.learner, "engine_threads": plan.engine}

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        """Checks only (every default was resolved before validation: :meth:`_resolve`)."""
        self._full_weights_servable()
        return self

    def _full_weights_servable(self) -> None:
        """Full fine-tuning publishes full weights, which a launched vLLM server reloads only
        with its dev-mode routes (``server.full_weights``)."""
        if self.learner.adapter != "none":
            return
        for i, engine in enumerate(self.run.policy.engines):
            if getattr(engine, "launch", False) and not engine.server.full_weights:
                raise ValueError(f"learner.adapter none publishes full weights, which launched vLLM servers "
                                 f"reload only with policy.engines[{i}].server.full_weights: true; set it")

    def rollout_policy(self) -> RolloutPolicy:
        """What the learner must reproduce of the rollouts: ``policy.model``, the run's ``sampling``
        (temperature, top_p) and ``max_staleness``."""
        return RolloutPolicy(model=self.run.policy.model, temperature=self.run.sampling.temperature,
                             top_p=self.run.sampling.top_p, max_staleness=self.run.max_staleness)


TRAIN_KEYS = tuple(name for name in TrainConfig.model_fields if name != "run")
"""The keys a training config adds to a run config's (TrainConfig's fields but ``run``)."""

def train_config_from_dict(data: dict[str, Any], origin: str = "train config") -> TrainConfig:
    """Validates a training config document (see the module docstring).

    Raises:
        ConfigError: a field does not validate (the message lists each bad field).
    """
    data = dict(data)
    known = set(RunConfig.model_fields) | set(TRAIN_KEYS)
    unknown = [k for k in data if k not in known]
    if unknown:
        raise ConfigError(f"{origin}: " + "; ".join(unknown_key_message(k, known) for k in unknown))
    train = {k: data.pop(k) for k in TRAIN_KEYS if k in data}
    for task in data["tasks"] if isinstance(data.get("tasks"), list) else []:  # else: the model's error
        if isinstance(task, dict):
            task.setdefault("passes", None)
    try:
        return TrainConfig.model_validate({"run": data, **train})
    except ValidationError as exc:
        raise ConfigError(f"{origin}: {validation_problems(exc, drop_root='run')}") from exc


def load_train_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Reads a training config from YAML and applies ``KEY.PATH=VALUE`` overrides.

    The run id defaults to the file's stem.

    Raises:
        ConfigError: unreadable file, bad YAML, a bad override or a field that does not validate.
    """
    data = read_config_document(path, overrides, "train config")
    return train_config_from_dict(data, f"train config {path}")


def load_shard_config(path: str | Path, overrides: list[str] | None = None) -> tuple[RunConfig, str | None]:
    """What ``gymfleet collect`` runs: a run config, or the collection of a training config.

    A training config (one with any of the training keys: ``learner``, ``bucket``, ...) makes
    the process a shard of that run: its tasks cycle until it is stopped (unless they set
    ``passes``), and it follows the run's bucket.

    Returns:
        The collection, and the bucket URL to follow (None for a plain run config).

    Raises:
        ConfigError: as :func:`load_train_config` or
            :func:`~gymfleet.orchestrator.config.load_run_config`.
    """
    data = read_config_document(path, overrides, "config")
    if not any(key in data for key in TRAIN_KEYS):
        try:
            return RunConfig.model_validate(data), None
        except ValidationError as exc:
            raise ConfigError(f"run config {path}: {validation_problems(exc)}") from exc
    train = train_config_from_dict(data, f"train config {path}")
    return train.run, train.bucket


def url_overrides(store: str | None, bucket: str | None) -> list[str]:
    """The ``--store``/``--bucket`` options of ``learn`` and ``sft`` as ``KEY=VALUE`` overrides
    (quoted: a URL is not parsed as YAML)."""
    return [f"{key}={json.dumps(url)}" for key, url in (("store", store), ("bucket", bucket)) if url]

