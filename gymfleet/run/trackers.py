"""The experiment trackers a training run can report to (``report_to``): TensorBoard and W&B
(offline), each behind the one :class:`Tracker` Protocol, picked by name from :data:`TRACKERS`.

What they are fed (the run's ``metrics.jsonl`` and ``learner.jsonl`` records, the held-out
table) is decided by :mod:`gymfleet.run.tracking`; a backend only writes. Nothing here reaches a
network: W&B runs in offline mode (``wandb sync`` uploads later).
"""

from __future__ import annotations

import difflib
import importlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, get_args

from pydantic import BeforeValidator

from gymfleet.core.errors import ConfigError

TrackerName = Literal["tensorboard", "wandb"]
"""A backend ``report_to`` may name (the keys of :data:`TRACKERS`)."""


def _names(value: Any) -> Any:
    """``"tensorboard,wandb"`` (``--set report_to=...``, ``--report-to``) as a list; ``none``: []."""
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and value == ["none"]:
        return []
    if isinstance(value, list):
        known = get_args(TrackerName)
        for name in value:
            if isinstance(name, str) and name not in known:
                near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                hint = f"did you mean {near[0]!r}?" if near else f"known: {', '.join(known)}, or none"
                raise ValueError(f"unknown tracker {name!r}: {hint}")
    return value


ReportTo = Annotated[list[TrackerName], BeforeValidator(_names)]
"""The ``report_to`` setting: tracker names, as a list or one comma-separated string."""

AXES = {"rollouts": "step/rollouts", "learner": "step/learner", "warm_start": "step/warm_start"}
"""Per axis of :class:`Scalars`, the W&B metric its step is logged as (TensorBoard uses the step itself)."""


@dataclass(frozen=True)
class Scalars:
    """The scalars of one record, on one axis.

    Attributes:
        axis: ``rollouts`` (a metrics.jsonl record; step = rollouts completed), ``learner``
            (a learner.jsonl step row; step = learner step) or ``warm_start`` (a learner.jsonl
            warm-start row; step = epoch, 0 before training).
        step: the x value on that axis.
        wall_time: when the record was written (Unix seconds).
        values: tag -> value; a tag is the record's JSON path joined with ``/`` under the axis's
            prefix (``rollouts/in_flight``, ``tasks/<task>/mean_reward``, ``learner/loss``).
    """

    axis: str
    step: int
    wall_time: float
    values: dict[str, float]


@dataclass(frozen=True)
class HeldOutTable:
    """The held-out evaluation as one table, one row per (family, policy).

    Attributes:
        columns: the column names.
        rows: the cells, in ``columns``' order.
        means: ``heldout/<family>/<policy>/<pass_at_1|mean_reward>`` -> value.
        step: the learner step the final policy was trained to (the scalars' x value).
    """

    columns: list[str]
    rows: list[list[Any]]
    means: dict[str, float]
    step: int


class Tracker(Protocol):
    """One experiment-tracking backend, open for one start of one run."""

    def log(self, scalars: Scalars) -> None:
        """Called for each record the run writes (each line of metrics.jsonl, each step row of
        learner.jsonl), in the order written on each axis, soon after it was written."""

    def log_heldout(self, table: HeldOutTable) -> None:
        """Called once, at the end of a run that made a held-out evaluation."""

    def close(self) -> None:
        """Called once when the job ends, however it ends: everything logged is on disk after it."""


def _import(module: str, name: str) -> Any:
    """``module``, or a ConfigError naming the install that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"report_to names {name}, but {exc.name or module} is not installed: "
                          f"pip install 'gymfleet[track]' (or drop {name} from report_to)") from exc


class TensorBoardTracker:
    """Event files in ``<report_dir>/tensorboard`` (``tensorboard --logdir`` reads them; each
    start of a run adds one file to the same folder, and TensorBoard shows them as one run).

    Raises:
        ConfigError: the tensorboard package is not installed.
    """

    def __init__(self, report_dir: Path, run_id: str, config: dict[str, Any]) -> None:
        _import("tensorboard", "tensorboard")
        writer_cls = _import("torch.utils.tensorboard", "tensorboard").SummaryWriter
        self.writer = writer_cls(log_dir=str(report_dir / "tensorboard"))
        self.writer.add_text("config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```")

    def log(self, scalars: Scalars) -> None:
        for tag, value in scalars.values.items():
            self.writer.add_scalar(tag, value, scalars.step, walltime=scalars.wall_time)

    def log_heldout(self, table: HeldOutTable) -> None:
        lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
        self.writer.add_text("heldout", "\n".join(lines), table.step)
        for tag, value in table.means.items():
            self.writer.add_scalar(tag, value, table.step)

    def close(self) -> None:
        self.writer.close()


def _cell(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


class WandbTracker:
    """A W&B run in offline mode under ``<report_dir>/wandb/offline-run-*`` (upload it later
    with ``wandb sync``); each start of a run is one W&B run, grouped by the run id.

    Each axis has its own step metric (``step/rollouts``, ``step/learner``: W&B's
    ``define_metric``), so the rollout and learner curves do not share one x.

    Raises:
        ConfigError: the wandb package is not installed.
    """

    def __init__(self, report_dir: Path, run_id: str, config: dict[str, Any]) -> None:
        wandb = _import("wandb", "wandb")
        self._table = wandb.Table
        settings = wandb.Settings(console="off", silent=True, x_disable_stats=True, disable_git=True,
                                  disable_code=True)
        self.run = wandb.init(mode="offline", dir=str(report_dir), project=os.environ.get("WANDB_PROJECT", "gymfleet"),
                              name=run_id, group=run_id, config=config, settings=settings)
        for prefix, metric in (("rollouts", AXES["rollouts"]), ("tasks", AXES["rollouts"]),
                               ("learner", AXES["learner"]), ("warm_start", AXES["warm_start"])):
            self.run.define_metric(metric)
            self.run.define_metric(f"{prefix}/*", step_metric=metric)

    def log(self, scalars: Scalars) -> None:
        self.run.log({**scalars.values, AXES[scalars.axis]: scalars.step})

    def log_heldout(self, table: HeldOutTable) -> None:
        self.run.log({"heldout": self._table(columns=table.columns, data=table.rows)})
        self.run.summary.update(table.means)

    def close(self) -> None:
        self.run.finish()


TRACKERS: dict[str, Callable[[Path, str, dict[str, Any]], Tracker]] = {
    "tensorboard": TensorBoardTracker, "wandb": WandbTracker}
"""Each ``report_to`` name's backend: ``(report_dir, run_id, resolved config) -> Tracker``."""


def open_trackers(names: Sequence[str], report_dir: Path, run_id: str, config: dict[str, Any]) -> list[Tracker]:
    """Opens the named trackers (none for an empty list).

    Raises:
        ConfigError: a named backend's package is not installed (the message names the install);
            the trackers opened before it are closed.
    """
    opened: list[Tracker] = []
    try:
        for name in names:
            opened.append(TRACKERS[name](report_dir, run_id, config))
    except BaseException:
        for tracker in opened:
            tracker.close()
        raise
    return opened
