"""Real SWE-bench Lite instances in Docker, offline: Flask 2.0 (spec Python 3.9, built FROM
images/swe-py39) and Flask 2.3 (Python 3.11), from the shallow repositories shipped in
envs/swe/fixtures/repos. Gold resolves both; an empty patch resolves neither."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.envs.swe.instances import FIXTURES_DIR, load_instances
from gymfleet.envs.swe.specs import load_spec

pytestmark = pytest.mark.docker

LITE = FIXTURES_DIR / "lite.jsonl"


def test_lite_fixtures_cover_two_pythons() -> None:
    instances = load_instances(LITE)
    assert {load_spec(i.repo, i.version).python for i in instances} == {"3.9", "3.11"}


@pytest.mark.parametrize("predictions", ["gold", "empty"])
def test_real_instances_gold_resolves_and_empty_does_not(
        docker_available: bool, tmp_path: Path, predictions: str) -> None:
    ids = [i.instance_id for i in load_instances(LITE)]
    args = ["eval", "swebench", "--dataset", str(LITE), "--predictions", predictions,
            "--run-id", "lite", "--output-dir", str(tmp_path), "--max-workers", "2",
            "--no-clone", "--run-empty-patches"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / f"{predictions}.lite.json").read_text())
    assert summary["error_ids"] == [], summary["errors"]
    folder = tmp_path / "logs/run_evaluation/lite" / predictions
    if predictions == "gold":
        assert sorted(summary["resolved_ids"]) == sorted(ids)
        for instance_id in ids:  # the post-patch install ran, offline (staged build wheels)
            log = (folder / instance_id / "test_output.txt").read_text()
            assert "No matching distribution" not in log and "Successfully installed" in log
        compare = CliRunner().invoke(app, [*args, "--compare", str(tmp_path)])
        assert compare.exit_code == 0, compare.output
        parity = json.loads(compare.stdout.strip().splitlines()[-1])
        assert parity["compared"] == len(ids) and parity["differences"] == [], parity
        return
    assert summary["resolved_ids"] == [] and sorted(summary["empty_patch_ids"]) == sorted(ids)
    for instance_id in ids:  # graded: every FAIL_TO_PASS test fails without the fix
        status = json.loads((folder / instance_id / "report.json").read_text())[instance_id]
        assert status["tests_status"]["FAIL_TO_PASS"]["success"] == []
