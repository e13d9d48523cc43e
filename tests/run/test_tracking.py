"""report_to: a fake run appends metrics.jsonl records (the real MetricsWriter) and learner.jsonl
step rows; the TensorBoard event files and the W&B offline run are read back with their own
readers and hold exactly those numbers, the held-out table and its means; what an earlier start
wrote is not sent again; a tracker whose package is missing is one line and exit 2."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.orchestrator.metrics import MetricsWriter
from gymfleet.run.config import TrainConfig, train_config_from_dict
from gymfleet.core.jsonl import open_for_append
from gymfleet.run.records import HeldOutSection, PassRate, PolicySource
from gymfleet.run.tracking import JsonlTail, RolloutAxis, Tracking, tracked
from gymfleet.run.trackers import HeldOutTable, Scalars, open_trackers
from gymfleet.core.errors import ConfigError
from tests.e2e.train_helpers import tiny_train_config
from tests.run.wandb_files import wandb_records

EVALUATION = HeldOutSection(
    "pass@1", 1.0, 2, 0, {"echo": ["w006", "w007"]}, [PolicySource("base"), PolicySource("final", "/a/v2", 2)],
    {"echo": {"base": PassRate(0.25, 8, 0.153, 0.3, 2), "final": PassRate(0.5, 8, 0.177, 0.55, 4)}})


def _config(tmp_path: Path, report_to: list[str], store: str | None = None) -> TrainConfig:
    return train_config_from_dict({
        "run_id": "track", "store": store or str(tmp_path / "store.db"), "metrics_path": str(tmp_path / "metrics.jsonl"),
        "report_dir": str(tmp_path / "report"), "report_to": report_to,
        "tasks": [{"name": "echo", "env_id": "tests.orchestrator.fakes:gymfleet-test/SlowEcho-v0"}]})


def _snapshot(completed: int, reward: float | None) -> dict[str, Any]:
    """What RunStats.snapshot gives the metrics file (two tasks)."""
    task = {"weight": 1.0, "in_flight": 2, "completed": completed, "by_status": {"ok": completed},
            "throughput_per_s": 0.5 * completed, "mean_reward": reward, "quarantined": None}
    return {"run_id": "track", "elapsed_s": 1.5 * completed, "in_flight": 2, "completed": 2 * completed,
            "paused": "", "policy_version": completed // 2,
            "tasks": {"echo": task, "math": {**task, "mean_reward": 0.1}}}


def _flat(record: dict[str, Any], prefix: str) -> dict[str, float]:
    """The test's own reading of a record: every number under its JSON path."""
    out: dict[str, float] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}/{key}")
        elif type(value) in (int, float):
            out[f"{prefix}/{key}"] = float(value)
    return out


def _fake_run(cfg: TrainConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Appends this start's records as the run would: metrics.jsonl lines and learner.jsonl rows."""
    with MetricsWriter(cfg.run.metrics_path) as metrics:
        for completed in (1, 2, 4):
            metrics.write("progress", {"time": 1_800_000_000.0 + completed, **_snapshot(completed, 0.25 * completed)})
    steps = [{"event": "step", "t": 1_800_000_010.0 + s, "idle_s": 0.1 * s, "step": s, "loss": -0.5 + s,
              "kl": 0.01 * s, "n_tokens": 40 * s, "published_version": s, "filter": {"n_kept": s},
              "reward_by_task": {"echo": 0.2 * s}} for s in (1, 2)]
    rows = [{"event": "start", "t": 1_800_000_009.0, "step": 0, "resumed": False}, *steps,
            {"event": "end", "t": 1_800_000_020.0, "step": 2}]
    with (Path(cfg.report_dir) / "learner.jsonl").open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    lines = [json.loads(line) for line in Path(cfg.run.metrics_path).read_text().splitlines()]
    return lines[-3:], steps


def _expected(metrics: list[dict[str, Any]], steps: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    expected: dict[str, list[tuple[int, float]]] = {}
    for rec in metrics:
        flat = _flat({k: v for k, v in rec.items() if k not in ("tasks", "time")}, "rollouts") | _flat(rec["tasks"], "tasks")
        for tag, value in flat.items():
            expected.setdefault(tag, []).append((rec["completed"], value))
    for row in steps:
        for tag, value in _flat({k: v for k, v in row.items() if k not in ("t", "step")}, "learner").items():
            expected.setdefault(tag, []).append((row["step"], value))
    return expected


def _run_tracked(cfg: TrainConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    report = Path(cfg.report_dir)
    report.mkdir(parents=True)
    with MetricsWriter(cfg.run.metrics_path) as metrics:  # an earlier start of the run, not sent again
        metrics.write("end", {"time": 1_700_000_000.0, **_snapshot(99, 0.99)})
    with Path(cfg.run.metrics_path).open("a") as f:
        f.write('{"event": "progress", "completed": 12')  # its torn last line, cut off on reopening

    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with tracked(cfg) as tracking:
            written = _fake_run(cfg)
            tracking.heldout(EVALUATION)
        return written

    return asyncio.run(run())


def test_tensorboard_event_files_hold_the_records_and_the_heldout_table(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = _config(tmp_path, ["tensorboard"], store="postgresql+asyncpg://gymfleet:s3cret@db.example/runs")
    metrics, steps = _run_tracked(cfg)  # (the store is never opened)
    acc = EventAccumulator(str(tmp_path / "report" / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    expected = _expected(metrics, steps)
    assert "tasks/echo/mean_reward" in expected and "learner/reward_by_task/echo" in expected
    assert "learner/filter/n_kept" in expected and "rollouts/completed" in expected
    got = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    heldout = {tag: got.pop(tag) for tag in list(got) if tag.startswith("heldout/")}
    assert got.keys() == expected.keys()
    for tag, points in expected.items():
        assert got[tag] == [(step, pytest.approx(value)) for step, value in points], tag
    assert acc.Scalars("tasks/echo/mean_reward")[0].wall_time == pytest.approx(1_800_000_001.0)
    assert heldout == {"heldout/echo/base/pass_at_1": [(2, 0.25)], "heldout/echo/final/pass_at_1": [(2, 0.5)],
                       "heldout/echo/base/mean_reward": [(2, pytest.approx(0.3))],
                       "heldout/echo/final/mean_reward": [(2, pytest.approx(0.55))]}
    table = acc.Tensors("heldout/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "| echo | final | 2 | 0.5000 | 0.1770 | 8 | 0.5500 |" in table
    config = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "postgresql+asyncpg://gymfleet:***@db.example/runs" in config and "s3cret" not in config


def test_wandb_offline_run_holds_the_records_and_the_heldout_table(tmp_path: Path) -> None:
    cfg = _config(tmp_path, ["wandb"], store="postgresql+asyncpg://gymfleet:s3cret@db.example/runs")
    metrics, steps = _run_tracked(cfg)
    (run_dir,) = (tmp_path / "report" / "wandb").glob("offline-run-*")
    records = wandb_records(next(run_dir.glob("run-*.wandb")))
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    got: dict[str, list[tuple[int, float]]] = {}
    for row in history:
        axis = "step/learner" if "step/learner" in row else "step/rollouts" if "step/rollouts" in row else None
        for tag, value in row.items():
            if axis and tag.split("/")[0] in ("rollouts", "tasks", "learner"):
                got.setdefault(tag, []).append((row[axis], value))
    expected = _expected(metrics, steps)
    assert got.keys() == expected.keys()
    for tag, points in expected.items():
        assert got[tag] == [(step, pytest.approx(value)) for step, value in points], tag
    summary = {i.key: json.loads(i.value_json) for r in records if r.WhichOneof("record_type") == "summary"
               for i in r.summary.update}
    assert summary["heldout/echo/final/pass_at_1"] == 0.5 and summary["heldout/echo/base/mean_reward"] == 0.3
    (table,) = (run_dir / "files" / "media" / "table").glob("heldout_*.table.json")
    content = json.loads(table.read_text())
    assert content["columns"][:4] == ["family", "policy", "version", "pass_at_1"]
    assert ["echo", "final", 2, 0.5, 0.177, 8, 0.55] in content["data"]
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert run.display_name == "track" and run.run_group == "track"
    assert not [p for p in (tmp_path / "report").rglob("*") if p.is_file() and b"s3cret" in p.read_bytes()]


class RecordingTracker:
    """A Tracker that keeps what it is sent."""

    def __init__(self) -> None:
        self.sent: list[Scalars] = []

    def log(self, scalars: Scalars) -> None:
        self.sent.append(scalars)

    def log_heldout(self, table: HeldOutTable) -> None:
        pass

    def close(self) -> None:
        pass


def _start_records(events: list[tuple[str, int, int]], done_before: int) -> list[dict[str, Any]]:
    """One start's metrics.jsonl lines: (event, completed, aborted) each; ``start`` first."""
    return [{"event": event, "time": 1.0 + i, "completed": completed,
             **({"done_before": done_before} if event == "start" else {}),
             "tasks": {"t": {"completed": completed, "by_status": {"truncated": completed - aborted,
                                                                  **({"aborted": aborted} if aborted else {})}}}}
            for i, (event, completed, aborted) in enumerate(events)]


def test_a_resumed_run_continues_the_rollouts_axis_with_one_point_per_step(tmp_path: Path) -> None:
    # Issue 41's trial: a run stopped after 24 rollouts (4 aborted, requeued) and resumed; the
    # second start counted from 0 again, so TensorBoard had two points at steps 0 and 24.
    first = _start_records([("start", 0, 0), ("progress", 6, 0), ("progress", 20, 0),
                            ("drained", 24, 4), ("end", 24, 4)], done_before=0)
    second = _start_records([("start", 0, 0), ("progress", 0, 0), ("progress", 1, 0),
                             ("progress", 24, 0), ("drained", 36, 4), ("end", 36, 4)], done_before=20)
    steps = []
    for records in (first, second):  # each start is its own process: its own Tracking
        path = tmp_path / "metrics.jsonl"
        tail = JsonlTail(path)
        with path.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        tracker = RecordingTracker()
        Tracking([tracker], [(tail, RolloutAxis())]).drain()
        steps += [s.step for s in tracker.sent]
    assert steps == [0, 6, 20, 21, 44, 52]
    assert steps == sorted(set(steps))


def test_the_tail_reads_complete_lines_only_once(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    tail = JsonlTail(path)
    assert tail.read() == []  # no file yet
    path.write_text('{"a": 1}\n{"b": ')
    assert tail.read() == [{"a": 1}]
    with path.open("a") as f:
        f.write('2}\nnot json\n{"c": 3}\n')
    assert tail.read() == [{"b": 2}, {"c": 3}] and tail.read() == []


def test_the_tail_starts_after_the_last_complete_line_and_skips_a_line_longer_than_a_read(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"old": 1}\n' * 20000 + '{"torn": ')  # written before: not sent again
    tail = JsonlTail(path, max_read_bytes=64)
    with open_for_append(path) as f:  # what the writer does on a rerun: the torn line cut off
        f.write("x" * 100 + '\n{"new": 2}\n')
    got = [tail.read() for _ in range(6)]
    assert [r for batch in got for r in batch] == [{"new": 2}]


def test_the_tail_of_a_device_reads_nothing_and_ends(tmp_path: Path) -> None:
    # metrics_path: /dev/full (every write fails) must not make the tracker read without end:
    # a read of /dev/full never reaches an end of file (the test process once grew to 23 GB)
    tail = JsonlTail(Path("/dev/full"))
    assert tail.offset == 0 and tail.read() == [] and tail.read() == []


def test_report_to_accepts_a_comma_list_and_none_and_refuses_other_names(tmp_path: Path) -> None:
    assert _config(tmp_path, "tensorboard, wandb").report_to == ["tensorboard", "wandb"]  # type: ignore[arg-type]
    assert _config(tmp_path, "none").report_to == []  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="report_to: .*unknown tracker 'tensorbord': did you mean 'tensorboard'"):
        _config(tmp_path, ["tensorbord"])
    with pytest.raises(ConfigError, match="unknown tracker 'mlflow': known: tensorboard, wandb, or none"):
        _config(tmp_path, "tensorboard,mlflow")


def test_a_missing_tracker_package_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # what `import wandb` does where it is not installed
    with pytest.raises(ConfigError, match=r"wandb is not installed: pip install 'gymfleet\[track\]'"):
        open_trackers(["wandb"], tmp_path, "r", {})
    config = tiny_train_config(tmp_path, "no-wandb")
    result = CliRunner().invoke(app, ["train", str(config), "--no-progress", "--report-to", "tensorboard,wandb"])
    assert result.exit_code == 2, result.output
    assert "error: report_to names wandb, but wandb is not installed" in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "store.db").exists()  # refused before the run started
