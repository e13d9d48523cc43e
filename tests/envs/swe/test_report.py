"""Report files in SWE-bench's layout, and what counts as finished for a resumed run."""

from __future__ import annotations

import json
from pathlib import Path

from gymfleet.envs.swe.harness import InstanceResult
from gymfleet.envs.swe.report import RunLayout, SWERunReport, write_instance


def test_finished_instances_have_a_report_and_errors_do_not(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path, "r1", "org/model")
    ok = InstanceResult("a__b-1", "org/model", "diff", resolved=True, test_log="log")
    bad = InstanceResult("a__b-2", "org/model", "garbage", error="patch did not apply: x")
    write_instance(layout, ok)
    write_instance(layout, bad)
    assert layout.run_dir.name == "org__model"
    assert layout.finished_report("a__b-1") == ok.report()["a__b-1"]
    assert layout.finished_report("a__b-2") is None
    folder = layout.instance_dir("a__b-2")
    assert "patch did not apply" in (folder / "run_instance.log").read_text()
    assert (folder / "patch.diff").read_text() == "garbage"
    (layout.instance_dir("a__b-1") / "report.json").write_text("{torn")
    assert layout.finished_report("a__b-1") is None


def test_summary_lists() -> None:
    summary = SWERunReport(total_instances=5, submitted_ids=["a", "b", "c", "d"])
    summary.add("a", {"resolved": True}, empty=False)
    summary.add("b", {"resolved": False}, empty=False)
    summary.add("c", {"resolved": False}, empty=True)
    summary.add("d", None, empty=False, error="tests timed out after 5 s")
    data = summary.as_dict()
    assert data["resolved_ids"] == ["a"] and data["unresolved_ids"] == ["b"]
    assert data["empty_patch_ids"] == ["c"] and data["error_ids"] == ["d"]
    assert data["completed_instances"] == 2 and data["errors"]["d"].startswith("tests timed out")
    json.dumps(data)
