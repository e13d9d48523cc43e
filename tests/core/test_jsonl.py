"""JSONL files appended across restarts: a torn last line is repaired, never glued onto."""

from __future__ import annotations

import json
from pathlib import Path

from gymfleet.core.jsonl import repair_torn_tail
from gymfleet.orchestrator.metrics import MetricsWriter


def test_a_rerun_after_a_torn_metrics_line_writes_only_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"event": "snapshot", "n": 1}\n{"event": "snapshot", "n"')  # disk full mid-line
    with MetricsWriter(path) as metrics:
        metrics.write("start", {"n": 2})
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [{"event": "snapshot", "n": 1}, {"event": "start", "n": 2}]


def test_repair_keeps_whole_files_and_cuts_a_file_with_no_newline(tmp_path: Path) -> None:
    whole, torn = tmp_path / "whole.jsonl", tmp_path / "torn.jsonl"
    whole.write_text('{"a": 1}\n' * 20000)  # longer than one scan block
    torn.write_text('{"a": ' + "1" * 70000)
    assert repair_torn_tail(whole) == 0 and repair_torn_tail(torn) == 70006
    assert whole.read_text() == '{"a": 1}\n' * 20000 and torn.read_text() == ""
    assert repair_torn_tail(tmp_path / "missing.jsonl") == 0
