"""`gymfleet sft CONFIG`: the warm start of a training run: gold demonstrations, supervised training
of the adapter on them, published as the run's first version (docs/train.md, Warm start)."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

import typer
from rich.console import Console

from gymfleet.cli.options import BucketOption, SetOption, TrainConfigArg

console = Console(stderr=True)
console.soft_wrap = not console.is_terminal  # piped: lines stay whole (never cut at 80 columns)


def sft_command(
    config: TrainConfigArg,
    set_: SetOption = None,
    store: Annotated[str | None, typer.Option(help="Store URL of the run (overrides the config's).")] = None,
    bucket: BucketOption = None,
) -> None:
    """Records gold demonstrations of the config's tasks (warmstart.episodes_per_instance each),
    trains the LoRA adapter on them (warmstart.epochs) and publishes it as version 1 of the run's
    bucket; `gymfleet train` then starts GRPO from it."""
    from gymfleet.run.config import load_train_config, url_overrides
    from gymfleet.run.warmstart import run_warm_start

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    cfg = load_train_config(config, list(set_ or []) + url_overrides(store, bucket))  # errors: one line, exit 2 (gymfleet.cli.errors)
    if cfg.learner_threads:
        import torch

        torch.set_num_threads(cfg.learner_threads)
    outcome = asyncio.run(run_warm_start(cfg, console))
    sft = outcome.sft
    print(f"demonstrations: {outcome.n_demonstrations} (run {outcome.demo_run_id}), "
          f"{sft.n_target_tokens} target tokens")
    print(f"epoch 0 (before): loss {sft.initial_loss:.4f}")
    for epoch, loss in enumerate(sft.epoch_losses, start=1):
        print(f"epoch {epoch}: loss {loss:.4f}")
    print(f"published v{sft.version} to {cfg.bucket} (run {cfg.run.run_id})")
