"""Loading SWE-bench instances and predictions from JSON, JSONL and parquet; bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gymfleet.envs.swe.errors import InstanceLoadError
from gymfleet.envs.swe.instances import FIXTURE_MIRROR, SWEInstance, load_instances
from gymfleet.envs.swe.predictions import load_predictions

FIELDS = {"instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement",
          "hints_text", "created_at", "version", "FAIL_TO_PASS", "PASS_TO_PASS",
          "environment_setup_commit"}


def row(instance_id: str = "psf__requests-2317", **extra: object) -> dict[str, object]:
    """A row shaped like the published data (test lists JSON-encoded, version a string)."""
    return {"instance_id": instance_id, "repo": "psf/requests", "base_commit": "a" * 40,
            "patch": "diff --git a/x b/x\n", "test_patch": "diff --git a/t b/t\n",
            "problem_statement": "it breaks", "hints_text": "", "created_at": "2014-11-01",
            "version": "2.4", "FAIL_TO_PASS": json.dumps(["test_a"]),
            "PASS_TO_PASS": json.dumps(["test_b[x y]"]), "environment_setup_commit": "b" * 40,
            **extra}


def test_fixtures_are_five_real_instances_with_the_twelve_fields() -> None:
    instances = load_instances("fixtures")
    assert len(instances) >= 5
    for inst in instances:
        assert FIELDS <= set(inst.model_dump())
        assert inst.FAIL_TO_PASS and inst.patch.startswith("diff --git")
        assert inst.test_patch.startswith("diff --git")
    repos = {i.repo.replace("/", "__") for i in instances}
    assert {p.name.removesuffix(".bundle") for p in FIXTURE_MIRROR.glob("*.bundle")} == repos


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".parquet"])
def test_load_each_file_format(tmp_path: Path, suffix: str) -> None:
    rows = [row("a__b-1", difficulty="hard"), row("a__b-2", difficulty="easy")]
    path = tmp_path / f"data{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(rows))
    elif suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    instances = load_instances(path)
    assert [i.instance_id for i in instances] == ["a__b-1", "a__b-2"]
    assert instances[0].FAIL_TO_PASS == ["test_a"]
    assert instances[1].PASS_TO_PASS == ["test_b[x y]"]
    assert instances[1].model_extra == {"difficulty": "easy"}
    assert json.loads(instances[0].row()["PASS_TO_PASS"]) == ["test_b[x y]"]


def test_instance_ids_select_and_unknown_ids_fail(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps(row(f"a__b-{n}")) for n in range(3)))
    assert [i.instance_id for i in load_instances(path, ["a__b-2", "a__b-0"])] == ["a__b-0", "a__b-2"]
    with pytest.raises(InstanceLoadError, match="unknown instance ids"):
        load_instances(path, ["nope"])


def test_bad_rows_and_files_are_clear_errors(tmp_path: Path) -> None:
    bad = row()
    del bad["base_commit"]
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(bad))
    with pytest.raises(InstanceLoadError, match="row 0 is not a SWE-bench instance"):
        load_instances(path)
    with pytest.raises(InstanceLoadError, match="does not exist"):
        load_instances(tmp_path / "missing.jsonl")
    (tmp_path / "broken.jsonl").write_text("{not json")
    with pytest.raises(InstanceLoadError, match="cannot read"):
        load_instances(tmp_path / "broken.jsonl")


def test_setup_commit_defaults_to_base_commit() -> None:
    inst = SWEInstance.model_validate(row(environment_setup_commit=None, hints_text=None))
    assert inst.setup_commit == "a" * 40 and inst.hints_text == ""


def test_dataset_name_without_a_hub_is_a_clear_error() -> None:
    code = ("from gymfleet.envs.swe.instances import load_instances\n"
            "try:\n    load_instances('princeton-nlp/SWE-bench_Lite')\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120).stdout
    assert out.startswith("InstanceLoadError") and "pass a local .json" in out


def test_predictions_gold_empty_and_file(tmp_path: Path) -> None:
    instances = load_instances("fixtures")
    gold = load_predictions("gold", instances)
    assert all(gold[i.instance_id].model_patch == i.patch for i in instances)
    assert all(p.is_empty for p in load_predictions("empty", instances).values())
    path = tmp_path / "preds.jsonl"
    path.write_text(json.dumps({"instance_id": "x", "model_name_or_path": "m",
                                "model_patch": "diff"}) + "\n")
    assert load_predictions(path, instances)["x"].model_name_or_path == "m"


def test_malformed_predictions_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"model_patch": "x"}))
    with pytest.raises(InstanceLoadError, match="prediction 0 is malformed"):
        load_predictions(path, [])
    line = json.dumps({"instance_id": "x", "model_patch": ""})
    path.write_text(f"{line}\n{line}\n")
    with pytest.raises(InstanceLoadError, match="two predictions for x"):
        load_predictions(path, [])
    with pytest.raises(InstanceLoadError, match="gold"):
        load_predictions(tmp_path / "nope.jsonl", [])
