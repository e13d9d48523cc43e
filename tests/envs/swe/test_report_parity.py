"""Report parity with swebench: incomplete_ids, empty patches before provisioning, unknown ids
with close matches, CSV datasets, a failing build naming its step and package (log kept), an
unreachable Python failing its instance before any clone while the run goes on."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.envs.swe.errors import InstanceLoadError
from gymfleet.envs.swe.evaluation import EvalConfig, evaluate
from gymfleet.envs.swe.harness import SWEHarness, SWEHarnessConfig
from gymfleet.envs.swe.image_build import build_failure
from gymfleet.envs.swe.instances import load_instances
from gymfleet.envs.swe.specs import load_spec

FIXTURES = load_instances("fixtures")


class _NoDocker(SWEHarness):
    """A harness that fails the test if anything is provisioned."""

    async def provision(self, instance):  # type: ignore[no-untyped-def]
        raise AssertionError(f"{instance.instance_id} was provisioned")


def test_incomplete_ids_and_empty_patches_before_anything_is_provisioned(tmp_path: Path) -> None:
    preds = tmp_path / "p.jsonl"
    preds.write_text(json.dumps({"instance_id": FIXTURES[0].instance_id,
                                 "model_name_or_path": "m", "model_patch": "  \n"}) + "\n")
    config = EvalConfig(predictions=str(preds), run_id="r", output_dir=tmp_path)
    summary, _ = asyncio.run(evaluate(config, harness=_NoDocker(SWEHarnessConfig())))
    data = summary.as_dict()
    assert data["empty_patch_ids"] == [FIXTURES[0].instance_id]
    assert data["incomplete_ids"] == sorted(i.instance_id for i in FIXTURES[1:])
    assert data["resolved_ids"] == [] and data["error_ids"] == []


def test_unknown_instance_id_lists_a_few_close_matches_not_all(lite_path: Path) -> None:
    with pytest.raises(InstanceLoadError) as err:
        load_instances(lite_path, ["psf__requests-231"])
    message = str(err.value)
    assert "close matches" in message and "psf__requests-2317" in message
    assert message.count("__") < 12  # a few, not all 300


def test_csv_dataset_is_read_and_a_broken_one_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    rows = [i.row() for i in FIXTURES]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    loaded = load_instances(path)
    assert [i.instance_id for i in loaded] == [i.instance_id for i in FIXTURES]
    assert loaded[0].FAIL_TO_PASS == FIXTURES[0].FAIL_TO_PASS
    bad = tmp_path / "bad.csv"
    bad.write_text("instance_id,repo\nx,y\n")
    result = CliRunner().invoke(app, ["eval", "swebench", "--dataset", str(bad),
                                      "--output-dir", str(tmp_path)])
    assert result.exit_code == 2 and "not a SWE-bench instance" in result.output
    assert len([x for x in result.output.strip().splitlines() if x.strip()]) <= 3
    assert "Traceback" not in result.output


def test_build_failure_names_the_step_and_the_package() -> None:
    log = ["Step 4/4 : RUN bash /root/setup_env.sh", "+ echo '>>>>> gymfleet step: pip_packages'",
           ">>>>> gymfleet step: pip_packages", "Collecting nosuchpkg-gymfleet==9.9",
           "ERROR: Could not find a version that satisfies the requirement nosuchpkg-gymfleet==9.9",
           "ERROR: No matching distribution found for nosuchpkg-gymfleet==9.9"]
    err = build_failure("gymfleet/swe.x:1", "The command returned a non-zero code: 1", log)
    assert err.step == "pip_packages" and err.package == "nosuchpkg-gymfleet==9.9"
    assert "step pip_packages, package nosuchpkg-gymfleet==9.9" in str(err)
    assert err.build_log.startswith("Step 4/4")


@pytest.mark.docker
def test_failing_build_and_unreachable_python_are_instance_errors_and_the_run_goes_on(
        docker_available: bool, tmp_path: Path) -> None:
    base = FIXTURES[0]
    rows = [base.model_copy(update={"instance_id": "broken__build-1", "version": "3.0-broken"}),
            base.model_copy(update={"instance_id": "old__python-1", "version": "3.0-py36"}),
            base]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r.row()) for r in rows) + "\n")
    (tmp_path / "specs.yaml").write_text(
        "python-semver/python-semver:\n"
        "  '3.0-broken': {python: '3.11', pip_packages: ['nosuchpkg-gymfleet==9.9']}\n"
        "  '3.0-py36': {python: '3.6', test_cmd: pytest -rA, log_parser: parse_log_pytest}\n")
    args = ["eval", "swebench", "--dataset", str(tmp_path / "d.jsonl"), "--predictions", "gold",
            "--spec-table", str(tmp_path / "specs.yaml"), "--run-id", "b", "--output-dir",
            str(tmp_path), "--no-clone", "--max-workers", "3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "gold.b.json").read_text())
    assert summary["resolved_ids"] == [base.instance_id]  # the run went on
    errors = summary["errors"]
    assert "step pip_packages, package nosuchpkg-gymfleet==9.9" in errors["broken__build-1"]
    log = (tmp_path / "logs/run_evaluation/b/gold/broken__build-1/build_image.log").read_text()
    assert "No matching distribution found for nosuchpkg-gymfleet==9.9" in log
    assert "Python 3.6" in errors["old__python-1"] and "--python-fallback nearest" in errors["old__python-1"]
    assert "clone" not in errors["old__python-1"].lower()


@pytest.mark.docker
def test_python_fallback_nearest_runs_the_instance_and_says_so(docker_available: bool,
                                                               tmp_path: Path) -> None:
    base = FIXTURES[0]
    row = base.model_copy(update={"instance_id": "old__python-2", "version": "3.0-py310"})
    (tmp_path / "d.jsonl").write_text(json.dumps(row.row()) + "\n")
    spec = load_spec(base.repo, base.version).model_dump(exclude={"repo", "version", "source"})
    (tmp_path / "specs.yaml").write_text(yaml.safe_dump(
        {base.repo: {"3.0-py310": {**spec, "python": "3.10"}}}))
    args = ["eval", "swebench", "--dataset", str(tmp_path / "d.jsonl"), "--predictions", "gold",
            "--spec-table", str(tmp_path / "specs.yaml"), "--run-id", "f", "--output-dir",
            str(tmp_path), "--no-clone"]
    refused = CliRunner().invoke(app, [*args, "--run-id", "f0"])
    assert refused.exit_code == 0 and "old__python-2" in json.loads(
        (tmp_path / "gold.f0.json").read_text())["error_ids"]
    result = CliRunner().invoke(app, [*args, "--python-fallback", "nearest"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "gold.f.json").read_text())["resolved_ids"] == ["old__python-2"]
    report = json.loads((tmp_path / "logs/run_evaluation/f/gold/old__python-2/report.json").read_text())
    assert report["old__python-2"]["python_fallback"] == "3.10->3.11"
