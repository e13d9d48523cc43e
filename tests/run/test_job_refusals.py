"""What the training job refuses before it opens anything: a rerun of a finished run (its learner
made ``budget.max_steps``: it used to collect rollouts for the whole wall budget, evaluate again
and end "no learner step"), and a task whose env id is unknown (it used to open the trackers
first, leaving an empty W&B run for ``wandb sync`` to upload)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.core.errors import ConfigError
from gymfleet.run.config import load_train_config
from gymfleet.run.job import RunCompleteError, run_job
from gymfleet.run.placement import Placement
from gymfleet.trainer import AdapterBucket
from tests.e2e.train_helpers import tiny_train_config


class NeverPlaced:
    """A placement the job must not reach (a real one would start engines and a learner); the
    tiny config has no warm start, which this placement says by returning None."""

    async def warm_start(self, *args: object, **kwargs: object) -> None:
        return None

    async def heldout(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("a complete run started its held-out stage")

    async def grpo(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("a complete run started its GRPO stage")


def _finished(tmp_path: Path, step: int) -> Path:
    config = tiny_train_config(tmp_path, "done", budget={"max_steps": 2})
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "adapter_model.safetensors").write_bytes(b"not read here")
    bucket = AdapterBucket(str(tmp_path / "bucket"), "done")
    bucket.publish(1, weights, {"step": 0, "consumed_group_ids": []})
    bucket.publish(2, weights, {"step": step, "consumed_group_ids": []})
    return config


async def test_a_run_at_its_max_steps_starts_no_stage(tmp_path: Path) -> None:
    cfg = load_train_config(_finished(tmp_path, step=2))
    placement: Placement = NeverPlaced()  # type: ignore[assignment]
    with pytest.raises(RunCompleteError, match=r"run done is complete: .*budget.max_steps=2 .*\(v2 in .*--set budget.max_steps=N"):
        await run_job(cfg, placement)
    assert not Path(cfg.run.store).exists()  # nothing opened


def test_gymfleet_train_says_so_and_exits_0(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["train", str(_finished(tmp_path, step=2)), "--no-progress"])
    assert done.exit_code == 0, done.output
    assert "run done is complete" in done.output and "Traceback" not in done.output


async def test_a_run_short_of_its_max_steps_goes_on(tmp_path: Path) -> None:
    cfg = load_train_config(_finished(tmp_path, step=1))
    with pytest.raises(AssertionError, match="started its GRPO stage"):
        await run_job(cfg, NeverPlaced())  # type: ignore[arg-type]


async def test_an_unknown_env_id_is_refused_before_the_report_folder_and_trackers_open(tmp_path: Path) -> None:
    config = tiny_train_config(tmp_path, "typo", report_to=["tensorboard"], tasks=[{
        "name": "echo", "env_id": "gymfleet/Terminl-v0", "group_size": 2, "max_turns": 1}])
    cfg = load_train_config(config)
    with pytest.raises(ConfigError, match="Terminl-v0"):
        await run_job(cfg, NeverPlaced())  # type: ignore[arg-type]
    assert not Path(cfg.report_dir).exists() and not Path(cfg.run.store).exists()


def _trained_with(tmp_path: Path, **learner: object) -> Path:
    """A run whose v1 records (as :meth:`Learner.meta` does) the tiny config's learner and policy."""
    config = tiny_train_config(tmp_path, "rank", budget={"max_steps": 4})
    cfg = load_train_config(config)
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "adapter_model.safetensors").write_bytes(b"not read here")
    meta = {"step": 1, "consumed_group_ids": [], "config": {**cfg.learner.model_dump(mode="json"), **learner},
            "policy": cfg.rollout_policy().model_dump(mode="json")}
    AdapterBucket(str(tmp_path / "bucket"), "rank").publish(1, weights, meta)
    return config


@pytest.mark.parametrize(("override", "message"), [
    ("learner.lora_rank=16", "learner.lora_rank is 1 in the run (v1), 16 in the config"),
    ("learner.dtype=bfloat16", "learner.dtype is float32 in the run (v1), bfloat16 in the config"),
    ("policy.model=/srv/other-model", "policy.model is embedded in the run (v1), /srv/other-model in the config"),
    ("learner.adapter=none", "learner.adapter is lora in the run (v1), none in the config"),
])
async def test_a_changed_setting_on_resume_is_refused_before_anything_starts(
        tmp_path: Path, override: str, message: str) -> None:
    # Before: the rerun generated rollouts, printed 53 KB of peft `size mismatch` lines, told the
    # user to rerun (which failed again) and flipped the run from completed to interrupted.
    cfg = load_train_config(_trained_with(tmp_path), [override])
    with pytest.raises(ConfigError, match=re.escape(message) + r".*--set run_id=NEW_ID"):
        await run_job(cfg, NeverPlaced())  # type: ignore[arg-type]
    assert not Path(cfg.run.store).exists() and not Path(cfg.report_dir).exists()  # nothing opened


def test_gymfleet_train_and_learn_refuse_a_changed_lora_rank_in_one_line(tmp_path: Path) -> None:
    config = _trained_with(tmp_path)
    for command in ("train", "learn"):
        r = CliRunner().invoke(app, [command, str(config), "--set", "learner.lora_rank=16"])
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output
        assert "learner.lora_rank is 1 in the run (v1), 16 in the config" in r.stderr


async def test_unchanged_settings_resume(tmp_path: Path) -> None:
    cfg = load_train_config(_trained_with(tmp_path), ["learner.learning_rate=0.5"])  # not frozen
    with pytest.raises(AssertionError, match="started its GRPO stage"):
        await run_job(cfg, NeverPlaced())  # type: ignore[arg-type]
