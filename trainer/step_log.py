"""``learner.jsonl``, the learner's log: one typed record per event and their one JSON codec.

The learner (:mod:`gymfleet.trainer.worker`) writes every line through :func:`encode`; the run
report, ``gymfleet train`` and ``gymfleet learn`` read them back through :func:`read_log` /
:func:`decode`, so a field's name lives in one place (its record) and no reader indexes a dict
by string. Each line is ``{"event": NAME, ...the record's fields}``; a line of an event this
module does not know (the warm start's ``warm_start`` rows) is skipped by the readers here, and
fields a record does not have are ignored.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Any, TypeVar

from pydantic import TypeAdapter

from gymfleet.trainer.step_metrics import StepMetrics

STEPS_FILE = "learner.jsonl"
"""The log's file name, in the run's report folder."""


@dataclass
class StepRow(StepMetrics):
    """One learner step (event ``step``): its :class:`StepMetrics` and when and where it ran.

    Attributes:
        t: wall-clock time the row was written (``time.time()``).
        idle_s: seconds the learner waited for complete groups before this step.
        version: the newest adapter version once the step ended.
        claimed: groups claimed and not yet acknowledged when the row was written.
        recovered: the row was rebuilt from a version's ``meta.json`` (its start was killed
            between the publish and this row).
    """

    t: float = 0.0
    idle_s: float = 0.0
    version: int = 0
    claimed: int = 0
    recovered: bool = False


@dataclass
class StartRow:
    """A learner start (event ``start``).

    Attributes:
        t: wall-clock time.
        step, version: the step and adapter version it resumed from (0, 0 when fresh).
        resumed: it resumed a run's bucket (False: this is the run's first start).
        released_claims: claims of a dead earlier learner it released.
        torch_threads: torch's intra-op threads in the learner; None when not reported.
        omp_wait_policy: ``OMP_WAIT_POLICY`` in the learner's environment.
        device: where the learner trains (``cpu``, ``cuda:0``).
        world_size: data-parallel ranks.
    """

    t: float
    step: int = 0
    version: int = 0
    resumed: bool = False
    released_claims: int = 0
    torch_threads: int | None = None
    omp_wait_policy: str | None = None
    device: str | None = None
    world_size: int = 1


@dataclass
class FinalPublishRow:
    """The publish of what a stopping learner trained since its last version (event ``final_publish``)."""

    t: float
    version: int
    step: int


@dataclass
class EndRow:
    """A learner's end (event ``end``): its last step and version, and the seconds it waited
    for data after its last step."""

    t: float
    step: int
    version: int
    idle_s: float = 0.0


@dataclass
class ErrorRow:
    """The learner stopped on a GymfleetError (event ``error``): the one-line message."""

    t: float
    message: str


LogRow = StepRow | StartRow | FinalPublishRow | EndRow | ErrorRow

EVENTS: dict[str, type[LogRow]] = {"step": StepRow, "start": StartRow, "final_publish": FinalPublishRow,
                                   "end": EndRow, "error": ErrorRow}
"""Each event's name and its record."""

_NAMES = {cls: name for name, cls in EVENTS.items()}
_ADAPTERS = {cls: TypeAdapter(cls) for cls in EVENTS.values()}


def encode(row: LogRow) -> dict[str, Any]:
    """The JSON object of ``row``: ``{"event": NAME}`` and its fields (``filter`` as an object)."""
    return {"event": _NAMES[type(row)]} | asdict(row)


def decode(obj: dict[str, Any]) -> LogRow | None:
    """The record of one parsed line; None for an event this log does not define.

    Raises:
        pydantic.ValidationError: a known event whose fields do not fit its record.
    """
    cls = EVENTS.get(obj.get("event", ""))
    if cls is None:
        return None
    known = {f.name for f in fields(cls)}
    return _ADAPTERS[cls].validate_python({k: v for k, v in obj.items() if k in known})


def write_row(out: IO[str], row: LogRow) -> None:
    """Appends ``row`` as one line and flushes (a reader follows the file as it grows)."""
    out.write(json.dumps(encode(row), default=str) + "\n")
    out.flush()


def read_log(report_dir: Path) -> list[LogRow]:
    """Every row of ``report_dir``'s ``learner.jsonl`` the log defines, in order ([] when there is
    none); a torn last line (a learner killed mid-write) is skipped."""
    path = Path(report_dir) / STEPS_FILE
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and (row := decode(obj)) is not None:
            rows.append(row)
    return rows


R = TypeVar("R", StepRow, StartRow, FinalPublishRow, EndRow, ErrorRow)


def last_row(report_dir: Path, kind: type[R]) -> R | None:
    """The newest row of type ``kind`` in ``report_dir``'s log (None when there is none)."""
    return next((r for r in reversed(read_log(report_dir)) if isinstance(r, kind)), None)
