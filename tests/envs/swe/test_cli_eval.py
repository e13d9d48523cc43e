"""`gymfleet eval swebench` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.envs.swe.report import RunLayout


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


def test_progress_lines_are_printed_when_the_output_is_piped(tmp_path: Path) -> None:
    instance = "python-semver__python-semver-426"
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": instance, "model_name_or_path": "m", "model_patch": ""}) + "\n")
    result = CliRunner().invoke(app, ["eval", "swebench", "--predictions", str(preds),
                                      "--run-id", "p", "--output-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"[1/1] {instance}: empty" in result.output  # CliRunner's output is not a terminal


def test_drift_pins_are_loaded_by_default_and_shown_in_the_report(lite_path: Path) -> None:
    from gymfleet.envs.swe.errors import ProvisionError
    from gymfleet.envs.swe.harness import SWEHarness, SWEHarnessConfig
    from gymfleet.envs.swe.instances import load_instances

    class NoImages(SWEHarness):
        async def provision(self, instance):  # type: ignore[no-untyped-def]
            raise ProvisionError("no images in this test")

    import asyncio

    sphinx = load_instances(lite_path, ["sphinx-doc__sphinx-8721"])[0]
    harness = NoImages(SWEHarnessConfig())
    assert "docutils<0.22" in harness.spec(sphinx).pip_packages
    report = asyncio.run(harness.grade(sphinx, sphinx.patch)).report()[sphinx.instance_id]
    assert report["spec_overrides"]["table"].endswith("drift.yaml")
    assert "docutils<0.22" in report["spec_overrides"]["fields"]["pip_packages"]
    plain = NoImages(SWEHarnessConfig(spec_tables=[]))
    assert "docutils<0.22" not in plain.spec(sphinx).pip_packages


@pytest.mark.docker
def test_sigint_stops_a_run_started_in_the_background(docker_available: bool, tmp_path: Path) -> None:
    """A shell's background job inherits SIGINT ignored; `kill -INT` must still stop the run."""
    import signal
    import subprocess
    import sys

    import docker

    args = [sys.executable, "-m", "gymfleet.cli", "eval", "swebench", "--predictions", "gold",
            "--instance-ids", "python-semver__python-semver-426", "--run-id", "sigint",
            "--output-dir", str(tmp_path), "--no-clone", "--run-empty-patches"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # piped: the run says it started
        assert "grading 1 instances" in first, first
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130, proc.stderr.read() if proc.stderr else ""
    assert not (tmp_path / "logs/run_evaluation/sigint/gold/python-semver__python-semver-426"
                / "report.json").exists()
    left = docker.from_env().containers.list(all=True, filters={"name": "gymfleet-swe-eval-sigint-"})
    assert left == [], [c.name for c in left]


def _preds(tmp_path: Path, rows: list[object]) -> Path:
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_prediction_of_wrong_types_is_one_line(tmp_path: Path) -> None:
    preds = _preds(tmp_path, [{"instance_id": ["x"], "model_name_or_path": 3, "model_patch": {}}])
    result = CliRunner().invoke(app, ["eval", "swebench", "--predictions", str(preds),
                                      "--output-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 or len(" ".join(result.output.split())) < 400
    assert "prediction 0 is malformed: instance_id" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_predictions_for_unknown_instances_are_refused_in_bounded_output(tmp_path: Path) -> None:
    preds = _preds(tmp_path, [{"instance_id": f"nope__nope-{n}", "model_patch": "x"}
                              for n in range(100_000)])
    result = CliRunner().invoke(app, ["eval", "swebench", "--predictions", str(preds),
                                      "--output-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output[:500]
    assert len(result.output) < 1000
    assert "100000 of 100000 predictions name instances not in the dataset" in " ".join(result.output.split())
    assert not (tmp_path / "logs").exists()


def test_a_model_named_dot_dot_writes_inside_the_run(tmp_path: Path) -> None:
    run = (tmp_path / "logs/run_evaluation/r").resolve()
    for model in ("..", ".", "", "../../etc", ".hidden"):
        layout = RunLayout(tmp_path, "r", model)
        assert layout.instance_dir("x").resolve().parent.parent == run, model
        assert layout.summary_path.resolve().parent == tmp_path.resolve()
