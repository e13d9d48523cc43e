"""`gymfleet eval swebench` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gymfleet.cli import app


def test_bad_dataset_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", "swebench", "--dataset", str(tmp_path / "no.jsonl"),
                                      "--output-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "does not exist" in " ".join(result.output.split())


@pytest.mark.docker
def test_eval_gold_one_instance(docker_available: bool, tmp_path: Path) -> None:
    instance = "python-semver__python-semver-426"
    args = ["eval", "swebench", "--predictions", "gold", "--instance-ids", instance,
            "--run-id", "cli", "--output-dir", str(tmp_path), "--max-workers", "1", "--no-clone"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["resolved_ids"] == [instance]
    summary = json.loads((tmp_path / "gold.cli.json").read_text())
    assert summary["resolved_ids"] == [instance] and summary["total_instances"] == 1
    assert (tmp_path / "logs/run_evaluation/cli/gold" / instance / "report.json").is_file()


def test_progress_counts_only_predicted_instances(tmp_path: Path) -> None:
    instance = "python-semver__python-semver-426"
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": instance, "model_name_or_path": "m", "model_patch": ""}) + "\n")
    args = ["eval", "swebench", "--predictions", str(preds), "--run-id", "p", "--output-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1/1" in result.output and "/5" not in result.output  # the fixtures hold 5, one is predicted
    assert json.loads(result.stdout.strip().splitlines()[-1])["empty_patch_ids"] == [instance]


def test_bad_predictions_file_fails_before_any_progress(tmp_path: Path) -> None:
    preds = tmp_path / "preds.jsonl"
    preds.write_text('{"instance_id": "a", "model_name_or_path": "m", "model_patch": ""}\n\n{"instance_id": "broken\n')
    result = CliRunner().invoke(app, ["eval", "swebench", "--predictions", str(preds), "--output-dir", str(tmp_path)])
    assert result.exit_code == 2 and "cannot read predictions" in result.output and "0/5" not in result.output
    assert "line 3 is not JSON" in " ".join(result.output.split())
