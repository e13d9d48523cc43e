"""Feeds a training run's records to the trackers ``report_to`` names (:mod:`gymfleet.run.trackers`).

One writer path: the trackers get exactly the records the run writes to its files, read back
as they are appended, wherever the roles run (the learner's own process, Ray actors):

* each line of ``metrics.jsonl`` (``run.metrics_path``) -> axis ``rollouts`` (step: rollouts
  completed in the run, earlier starts included: :class:`RolloutAxis`), tags ``rollouts/<key>`` and ``tasks/<task>/<key>`` (the per-task curves);
* each ``step`` row of ``learner.jsonl`` (the report folder) -> axis ``learner`` (step: the
  learner step), tags ``learner/<key>``;
* each ``warm_start`` row of ``learner.jsonl`` (the warm start's loss per epoch) -> axis
  ``warm_start`` (step: the epoch, 0 before training), tag ``warm_start/loss``;
* at the end, the held-out evaluation as a table and its means as ``heldout/...`` scalars.

A tag is the value's JSON path in the record, joined with ``/``; every number is sent (booleans,
strings and nulls are not). One point per step of an axis: a record whose step is not past the
last one sent on its axis (a periodic metrics line with no rollout completed since, a step row
written back on resume) is not sent. Only what this start of the run appends is sent: a resumed
run's earlier starts were sent by those starts.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

from gymfleet.orchestrator import display_url
from gymfleet.run.config import TrainConfig
from gymfleet.run.records import HeldOutSection
from gymfleet.run.trackers import HeldOutTable, Scalars, Tracker, open_trackers
from gymfleet.trainer import STEPS_FILE

FOLLOW_INTERVAL_S = 2.0
"""Seconds between two reads of the record files while the run goes on."""
HELDOUT_COLUMNS = ["family", "policy", "version", "pass_at_1", "se", "n", "mean_reward"]


class JsonlTail:
    """Reads the complete lines appended to a JSONL file since the last read.

    Starts after the last complete line the file holds when created (a torn last line, which
    the writer cuts off when it reopens the file, is skipped). Only a regular file is followed:
    a device such as ``/dev/full`` or a FIFO reads as empty (reading ``/dev/full`` never ends).
    Each read takes at most ``max_read_bytes`` (the rest comes with the next read).

    Args:
        path: the file; it may not exist yet.
        max_read_bytes: bytes read per call at most.
    """

    def __init__(self, path: Path, max_read_bytes: int = 16 << 20) -> None:
        self.path, self.max_read_bytes = path, max_read_bytes
        self.offset = 0
        with suppress(OSError):
            if path.is_file():
                self.offset = _after_last_newline(path)

    def read(self) -> list[dict[str, Any]]:
        """The records appended since the last call (a line that does not parse is skipped)."""
        try:
            if not self.path.is_file():
                return []
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read(self.max_read_bytes)
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == self.max_read_bytes:
            self.offset += len(data)  # one line longer than a read: skipped, not waited on for ever
            return []
        self.offset += end
        records = []
        for line in data[:end].splitlines():
            with suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    records.append(record)
        return records


def _after_last_newline(path: Path, block: int = 65536) -> int:
    """The offset just after the last ``\n`` of a regular file (0 when it has none), read from
    the end in blocks (a long record file is not read whole)."""
    with path.open("rb") as f:
        end = f.seek(0, 2)
        while end > 0:
            start = max(0, end - block)
            f.seek(start)
            cut = f.read(end - start).rfind(b"\n")
            if cut >= 0:
                return start + cut + 1
            end = start
    return 0


def flatten(record: dict[str, Any], prefix: str) -> Iterator[tuple[str, float]]:
    """Every number in ``record`` (nested dicts included) as ``(prefix/json/path, value)``;
    booleans, strings, lists and nulls are left out."""
    for key, value in record.items():
        tag = f"{prefix}/{key}"
        if isinstance(value, dict):
            yield from flatten(value, tag)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield tag, float(value)


def rollout_scalars(record: dict[str, Any]) -> Scalars:
    """A metrics.jsonl record's scalars: ``tasks`` under ``tasks/``, the rest under ``rollouts/``
    (its ``time`` is the wall time, not a scalar)."""
    rest = {k: v for k, v in record.items() if k not in ("tasks", "time")}
    values = dict(flatten(rest, "rollouts")) | dict(flatten(record.get("tasks") or {}, "tasks"))
    return Scalars("rollouts", int(record.get("completed") or 0), float(record.get("time") or 0.0), values)


class RolloutAxis:
    """metrics.jsonl records as scalars on one ``rollouts`` axis across a run's starts.

    Each start counts ``completed`` from 0, so a resumed run's points used to land on the x
    values its earlier starts had drawn (two points per step). Here x = the rollouts the run had
    stored before this start (its ``start`` record's ``done_before``) + those this start
    completed, less those it aborted (requeued: they run again, and ``done_before`` leaves
    them out); a resumed start's records at or before its first x are not sent.
    """

    def __init__(self) -> None:
        self.before = 0

    def __call__(self, record: dict[str, Any]) -> Scalars | None:
        if record.get("event") == "start":
            self.before = int(record.get("done_before") or 0)
        tasks = (record.get("tasks") or {}).values()
        aborted = sum(int((t.get("by_status") or {}).get("aborted") or 0) for t in tasks)
        scalars = rollout_scalars(record)
        step = self.before + scalars.step - aborted
        if self.before and step <= self.before:
            return None
        return replace(scalars, step=step)


def learner_scalars(row: dict[str, Any]) -> Scalars | None:
    """A learner.jsonl ``step`` row's scalars under ``learner/`` (its ``t`` is the wall time, its
    ``step`` the x value), a ``warm_start`` row's under ``warm_start/`` (x: its epoch); None for
    the other events (start, final_publish, end)."""
    if row.get("event") == "warm_start":
        values = {f"warm_start/{k}": float(v) for k, v in row.items()
                  if k not in ("event", "t", "epoch") and isinstance(v, (int, float)) and not isinstance(v, bool)}
        return Scalars("warm_start", int(row.get("epoch") or 0), float(row.get("t") or 0.0), values)
    if row.get("event") != "step":
        return None
    rest = {k: v for k, v in row.items() if k not in ("t", "step")}
    return Scalars("learner", int(row["step"]), float(row.get("t") or 0.0), dict(flatten(rest, "learner")))


def heldout_table(evaluation: HeldOutSection, step: int) -> HeldOutTable:
    """The report's ``evaluation`` section as a :class:`HeldOutTable` (one row per family and
    policy; means ``heldout/<family>/<policy>/pass_at_1`` and ``.../mean_reward``)."""
    versions = {p.name: p.version for p in evaluation.policies}
    rows, means = [], {}
    for family, by_policy in evaluation.by_family.items():
        for policy, score in by_policy.items():
            rows.append([family, policy, versions.get(policy), score.pass_at_1, score.se, score.n, score.mean_reward])
            means[f"heldout/{family}/{policy}/pass_at_1"] = float(score.pass_at_1)
            means[f"heldout/{family}/{policy}/mean_reward"] = float(score.mean_reward)
    return HeldOutTable(list(HELDOUT_COLUMNS), rows, means, step)


class Tracking:
    """The run's record files followed into its trackers.

    Args:
        trackers: the open trackers (none: every call does nothing).
        sources: the files to follow, each with what makes a record's scalars (None: skip it).
    """

    def __init__(self, trackers: list[Tracker],
                 sources: list[tuple[JsonlTail, Callable[[dict[str, Any]], Scalars | None]]]) -> None:
        self.trackers = trackers
        self.sources = sources
        self.last_learner_step = 0
        self.last_step: dict[str, int] = {}
        """Per axis, the step of the last point sent (one point per step)."""
        self._lock = threading.Lock()  # the follower's drain runs in a worker thread

    def drain(self) -> int:
        """Sends every record appended since the last call; returns how many were sent."""
        with self._lock:
            return self._drain()

    def _drain(self) -> int:
        sent = 0
        for tail, scalars_of in self.sources:
            for record in tail.read():
                scalars = scalars_of(record)
                if scalars is None or scalars.step <= self.last_step.get(scalars.axis, -1):
                    continue
                self.last_step[scalars.axis] = scalars.step
                if scalars.axis == "learner":
                    self.last_learner_step = max(self.last_learner_step, scalars.step)
                for tracker in self.trackers:
                    tracker.log(scalars)
                sent += 1
        return sent

    async def follow(self, interval_s: float = FOLLOW_INTERVAL_S) -> None:
        """Drains every ``interval_s`` until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.to_thread(self.drain)

    def heldout(self, evaluation: HeldOutSection | None) -> None:
        """Sends the records not sent yet, then the report's held-out evaluation (nothing when
        there is none)."""
        if evaluation and self.trackers:
            self.drain()  # the table's step is the newest learner step
            table = heldout_table(evaluation, self.last_learner_step)
            for tracker in self.trackers:
                tracker.log_heldout(table)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()


def public_config(value: Any) -> Any:
    """The resolved config as the trackers get it: every string with a URL's password in it
    (a PostgreSQL store) has it replaced by ``***`` (a W&B run's config is uploaded)."""
    if isinstance(value, dict):
        return {k: public_config(v) for k, v in value.items()}
    if isinstance(value, list):
        return [public_config(v) for v in value]
    return display_url(value) if isinstance(value, str) else value


@asynccontextmanager
async def tracked(cfg: TrainConfig) -> AsyncIterator[Tracking]:
    """The trackers of ``cfg.report_to``, following the run's record files while the ``async
    with`` lasts; at its end the last records are sent and the trackers closed.

    Raises:
        ConfigError: a tracker's package is not installed (before anything else is opened).
    """
    report_dir = Path(cfg.report_dir)
    trackers = await asyncio.to_thread(
        open_trackers, cfg.report_to, report_dir, cfg.run.run_id, public_config(cfg.model_dump(mode="json")))
    tracking = Tracking(trackers, [(JsonlTail(Path(cfg.run.metrics_path)), RolloutAxis()),
                                   (JsonlTail(report_dir / STEPS_FILE), learner_scalars)])
    if not trackers:
        yield tracking
        return
    follower = asyncio.create_task(tracking.follow(), name="report-to")
    try:
        yield tracking
    finally:
        follower.cancel()
        with suppress(asyncio.CancelledError):
            await follower
        await asyncio.to_thread(tracking.drain)
        await asyncio.to_thread(tracking.close)
