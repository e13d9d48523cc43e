"""The warm-start stage of a training run: record demonstrations, train the adapter on them, publish v1.

A small model that never writes an env's action format earns reward 0 on every rollout, and
GRPO learns nothing from groups of equal rewards. The warm start records gold-policy episodes
(:mod:`gymfleet.run.demonstrations`), trains the learner's LoRA adapter on them by cross-entropy
(:func:`gymfleet.trainer.warm_start`) and publishes it as the run's first version; the learner's
``resume()`` then starts GRPO from it, and the engines serve it from the first rollout. Run by
``gymfleet sft CONFIG``, and by ``gymfleet train`` when ``warmstart.enabled`` (docs/train.md).

Demonstrations already recorded for the run (a completed ``<run_id>.demos`` holding solved
episodes) are reused; otherwise they are recorded (a recording cut short resumes).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from gymfleet.core.errors import TrainError
from gymfleet.core.jsonl import open_for_append
from gymfleet.core.models import load_tokenizer
from gymfleet.core.records import Trajectory
from gymfleet.orchestrator import TrajectoryStore, RunNotFoundError
from gymfleet.run.config import TrainConfig
from gymfleet.run.demonstrations import DemoRecording, demo_run_id, load_demonstrations, record_demonstrations
from gymfleet.trainer import STEPS_FILE, AdapterBucket, SFTReport, warm_start


@dataclass
class WarmStartOutcome:
    """How a warm start went.

    Attributes:
        demo_run_id: where the demonstrations are stored.
        recording: what was recorded this time (None: earlier demonstrations were reused).
        n_demonstrations: demonstrations trained on.
        sft: the supervised training (losses per epoch, the published version).
    """

    demo_run_id: str
    recording: DemoRecording | None
    n_demonstrations: int
    sft: SFTReport


async def _recorded(cfg: TrainConfig) -> bool:
    """Whether the run's demonstrations were recorded to the end and some were solved."""
    run_id = cfg.run.run_id
    async with await TrajectoryStore.open(cfg.run.store) as store:
        try:
            done = (await store.run_summary(demo_run_id(run_id))).status == "completed"
        except RunNotFoundError:
            done = False
        return done and bool(await load_demonstrations(store, run_id))


async def _demonstrations(cfg: TrainConfig, console: Console) -> tuple[DemoRecording | None, list[Trajectory]]:
    run_id = cfg.run.run_id
    recording = None
    if not await _recorded(cfg):  # none, cut short, or none solved
        tokenizer = await asyncio.to_thread(load_tokenizer, cfg.run.policy.model)
        recording = await record_demonstrations(cfg.run, tokenizer, cfg.warmstart.episodes_per_instance,
                                                cfg.warmstart.max_instances_per_task, console)
        console.print(f"recorded demonstrations {recording.by_status} ({recording.n_solved} solved) "
                      f"as run {recording.run_id}", markup=False, highlight=False)
    async with await TrajectoryStore.open(cfg.run.store) as store:
        demos = await load_demonstrations(store, run_id)
    if not demos:
        raise TrainError(
            f"no solved demonstration in run {demo_run_id(run_id)} of {cfg.run.store}: the gold policies of "
            f"the tasks did not earn reward (see `gymfleet runs show {demo_run_id(run_id)}`); fix the envs or "
            "their gold policies")
    return recording, demos


async def run_warm_start(cfg: TrainConfig, console: Console | None = None) -> WarmStartOutcome:
    """Records (or reuses) the run's demonstrations, trains the adapter on them, publishes version 1.

    Raises:
        TrainError: the bucket already holds a version, or no demonstration earned reward.
        ConfigError: no task can run here, or a task's env or instances are wrong.
        StoreError: the store cannot be opened.
        BucketError: the bucket cannot be written.
    """
    console = console or Console(stderr=True)
    bucket = AdapterBucket(cfg.bucket, cfg.run.run_id)
    if bucket.versions():  # before recording anything
        raise TrainError(
            f"the bucket {bucket.root} already holds versions {bucket.versions()} of run {cfg.run.run_id}: a warm "
            "start publishes a run's first version; use a new run id (or bucket), or `gymfleet train` from there")
    recording, demos = await _demonstrations(cfg, console)
    meta = {"demonstrations_run_id": demo_run_id(cfg.run.run_id)}
    sft_config = cfg.warmstart  # a WarmStartConfig is an SFTConfig
    epochs = sft_config.epochs

    steps_path = Path(cfg.report_dir) / STEPS_FILE
    steps_path.parent.mkdir(parents=True, exist_ok=True)

    def say(epoch: int, loss: float) -> None:  # from the training thread: rich's console takes a lock
        when = "before training" if epoch == 0 else f"after epoch {epoch}/{epochs}"
        console.print(f"warm start: loss {loss:.4f} nats per target token {when}", markup=False, highlight=False)
        with open_for_append(steps_path) as out:  # the trackers' warm_start/loss (gymfleet.run.tracking)
            out.write(json.dumps({"event": "warm_start", "t": time.time(), "epoch": epoch, "loss": loss}) + "\n")

    console.print(f"warm start: training the adapter on {len(demos)} demonstrations for {epochs} epochs",
                  markup=False, highlight=False)
    report = await asyncio.to_thread(warm_start, cfg.learner, cfg.rollout_policy(), bucket, demos, sft_config,
                                     meta, say)
    return WarmStartOutcome(demo_run_id(cfg.run.run_id), recording, len(demos), report)


async def warm_start_if_new(cfg: TrainConfig, console: Console) -> WarmStartOutcome | None:
    """``gymfleet train``'s stage: the warm start when ``warmstart.enabled`` and the bucket is empty
    (a resumed run skips it). Raises as :func:`run_warm_start`."""
    if not cfg.warmstart.enabled:
        return None
    if AdapterBucket(cfg.bucket, cfg.run.run_id).versions():
        console.print("warm start skipped: the bucket already holds a version (resuming)", markup=False)
        return None
    outcome = await run_warm_start(cfg, console)
    console.print(describe(outcome), markup=False, highlight=False)
    return outcome


def describe(outcome: WarmStartOutcome) -> str:
    """One line: the loss per epoch and the version published."""
    sft = outcome.sft
    losses = " -> ".join(f"{x:.3f}" for x in [sft.initial_loss, *sft.epoch_losses])
    return (f"warm start: {outcome.n_demonstrations} demonstrations ({sft.n_target_tokens} target tokens) of run "
            f"{outcome.demo_run_id}; SFT loss per token (nats) {losses} over {len(sft.epoch_losses)} epochs; "
            f"published v{sft.version}")
