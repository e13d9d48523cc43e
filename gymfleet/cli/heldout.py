"""`gymfleet eval heldout CONFIG [--adapter PATH]`: a training config's held-out evaluation of one policy."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from gymfleet.cli.options import SetOption, pick_version

if TYPE_CHECKING:
    from gymfleet.run.config import TrainConfig
    from gymfleet.run.heldout import PolicySource

console = Console(stderr=True)


def heldout_command(
    config: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Training config (YAML) with heldout.instances.")],
    adapter: Annotated[str | None, typer.Option(
        help="A PEFT adapter folder, or a version of the config's bucket (v3, 3 or latest); "
             "without it: the base model.")] = None,
    set_: SetOption = None,
) -> None:
    """Evaluates one policy on the config's held-out instances; prints pass@1 ± SE (n) per task family."""
    from gymfleet.run.config import load_train_config
    from gymfleet.run.heldout import BASE, evaluate_heldout

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    cfg = load_train_config(config, list(set_ or []))  # errors: one line, exit 2 (gymfleet.cli.errors)
    if not cfg.heldout.instances:
        from gymfleet.core.errors import ConfigError

        raise ConfigError(f"{config} sets no heldout.instances: list held-out instance ids per task "
                          "(docs/train.md, Held-out evaluation)")
    workdir = Path(cfg.report_dir) / "heldout-eval"
    policy = BASE if adapter is None else _policy(cfg, adapter, workdir / "adapters")
    evaluation = asyncio.run(evaluate_heldout(cfg, [policy], workdir, console))
    print(f"held-out pass@1 of {policy.name} (a rollout passes when its reward >= {cfg.heldout.pass_threshold:g}; "
          "± the binomial standard error sqrt(p(1-p)/n)):")
    for family, by_policy in evaluation.scores.items():
        score = by_policy[policy.name]
        print(f"  {family}: pass@1 {score.describe()}, mean reward {score.mean_reward:.3f}")
    for family, error in evaluation.errors.items():
        print(f"  {family}: not evaluated: {error}")
    if not evaluation.scores:
        raise typer.Exit(2)


def _policy(cfg: TrainConfig, adapter: str, fetch_dir: Path) -> PolicySource:
    """``adapter`` as a folder, or a version of the run's bucket fetched into ``fetch_dir``."""
    from gymfleet.core.errors import ConfigError
    from gymfleet.run.heldout import PolicySource
    from gymfleet.trainer import AdapterBucket

    if Path(adapter).is_dir():
        return PolicySource(Path(adapter).name, str(Path(adapter).resolve()))
    bucket = AdapterBucket(cfg.bucket, cfg.run.run_id)
    try:
        version = pick_version(adapter, bucket.versions(), f"the bucket {cfg.bucket} of run {cfg.run.run_id}")
    except ConfigError as exc:
        raise ConfigError(f"--adapter {adapter}: no such folder, and {exc}; pass an adapter folder or one of "
                          "those versions") from exc
    return PolicySource(f"v{version}", str(bucket.fetch(version, fetch_dir)), version)
