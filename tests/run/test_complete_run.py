"""A rerun of a finished run (its learner made ``budget.max_steps``) does nothing, and says so
(it used to collect rollouts for the whole wall budget, evaluate again and end "no learner step")."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.run.config import load_train_config
from gymfleet.run.job import RunCompleteError, run_job
from gymfleet.run.placement import Placement
from gymfleet.trainer import AdapterBucket
from tests.e2e.train_helpers import tiny_train_config


class NeverPlaced:
    """A placement the job must not reach (a real one would start engines and a learner)."""

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
