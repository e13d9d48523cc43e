"""Evaluation reports in SWE-bench's layout, and what a run already finished.

Per instance, under ``<output>/logs/run_evaluation/<run_id>/<model>/<instance_id>/``:
``patch.diff`` (the prediction), ``test_output.txt`` (patch application and test log),
``report.json`` (swebench's per-instance report), ``run_instance.log`` (what happened,
errors included) and, when this run built (or failed to build) an image, ``build_image.log``
(the whole build log). The run summary ``<output>/<model>.<run_id>.json`` has swebench's fields
(``resolved_ids``, ``unresolved_ids``, ``error_ids``, ``empty_patch_ids`` ...).

An instance is finished when its ``report.json`` exists; an errored instance writes none (as in
swebench), so running the evaluation again retries errors and skips everything else.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymfleet.envs.swe.harness import InstanceResult

SCHEMA_VERSION = 2


def _safe(name: str) -> str:
    """``name`` as one path component: characters outside ``[A-Za-z0-9_.@-]`` become ``__``
    (swebench writes ``/`` so), and a leading dot gets a ``_`` (``..`` names no parent)."""
    safe = re.sub(r"[^A-Za-z0-9_.@-]", "__", name)[:200]
    return "_" + safe if not safe or safe.startswith(".") else safe


@dataclass(frozen=True)
class RunLayout:
    """Paths of one evaluation run."""

    output_dir: Path
    run_id: str
    model: str

    @property
    def run_dir(self) -> Path:
        """``logs/run_evaluation/<run_id>/<model>``."""
        return self.output_dir / "logs" / "run_evaluation" / self.run_id / _safe(self.model)

    def instance_dir(self, instance_id: str) -> Path:
        """The folder of one instance's files."""
        return self.run_dir / instance_id

    @property
    def summary_path(self) -> Path:
        """``<model>.<run_id>.json``."""
        return self.output_dir / f"{_safe(self.model)}.{self.run_id}.json"

    def finished_report(self, instance_id: str) -> dict[str, Any] | None:
        """The instance's ``report.json`` body when a previous run finished it, else None."""
        path = self.instance_dir(instance_id) / "report.json"
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())[instance_id]
        except (ValueError, KeyError):  # a torn write: redo the instance
            return None


def write_instance(layout: RunLayout, result: InstanceResult) -> Path:
    """Writes one instance's files; ``report.json`` only when it finished (no error)."""
    folder = layout.instance_dir(result.instance_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "patch.diff").write_text(result.model_patch or "")
    (folder / "test_output.txt").write_text(result.test_log)
    lines = [f"instance {result.instance_id} model {result.model_name_or_path}",
             f"image {result.image or '-'}",
             "timings_s " + json.dumps({k: round(v, 2) for k, v in result.timings_s.items()})]
    lines.append(f"error: {result.error}" if result.error else f"resolved: {result.resolved}")
    (folder / "run_instance.log").write_text("\n".join(lines) + "\n")
    if result.build_log:
        (folder / "build_image.log").write_text(result.build_log)
    report = folder / "report.json"
    if result.error is None:
        tmp = report.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result.report(), indent=2))
        tmp.replace(report)  # atomic: a killed run never leaves half a report
    else:
        report.unlink(missing_ok=True)
    return folder


@dataclass
class SWERunReport:
    """The run-level report (swebench's ``make_run_report`` fields)."""

    total_instances: int
    submitted_ids: list[str]
    resolved_ids: list[str] = field(default_factory=list)
    unresolved_ids: list[str] = field(default_factory=list)
    empty_patch_ids: list[str] = field(default_factory=list)
    error_ids: list[str] = field(default_factory=list)
    incomplete_ids: list[str] = field(default_factory=list)
    skipped_ids: list[str] = field(default_factory=list)
    """Instances a previous run had finished (not redone by this run)."""
    errors: dict[str, str] = field(default_factory=dict)
    """instance id -> error, for ``error_ids``."""

    @property
    def completed_ids(self) -> list[str]:
        """Instances graded (resolved or not)."""
        return sorted(self.resolved_ids + self.unresolved_ids)

    def as_dict(self) -> dict[str, Any]:
        """The summary file's JSON."""
        return {
            "total_instances": self.total_instances,
            "submitted_instances": len(self.submitted_ids),
            "completed_instances": len(self.completed_ids),
            "resolved_instances": len(self.resolved_ids),
            "unresolved_instances": len(self.unresolved_ids),
            "empty_patch_instances": len(self.empty_patch_ids),
            "error_instances": len(self.error_ids),
            "completed_ids": self.completed_ids,
            "incomplete_ids": sorted(self.incomplete_ids),
            "empty_patch_ids": sorted(self.empty_patch_ids),
            "submitted_ids": sorted(self.submitted_ids),
            "resolved_ids": sorted(self.resolved_ids),
            "unresolved_ids": sorted(self.unresolved_ids),
            "error_ids": sorted(self.error_ids),
            "errors": dict(sorted(self.errors.items())),
            "skipped_finished_ids": sorted(self.skipped_ids),
            "schema_version": SCHEMA_VERSION,
        }

    def add(self, instance_id: str, report: dict[str, Any] | None, empty: bool,
            error: str | None = None) -> None:
        """Files one instance under the right list."""
        if error is not None:
            self.error_ids.append(instance_id)
            self.errors[instance_id] = error
        elif report is None:
            self.incomplete_ids.append(instance_id)
        elif empty:
            self.empty_patch_ids.append(instance_id)
        elif report.get("resolved"):
            self.resolved_ids.append(instance_id)
        else:
            self.unresolved_ids.append(instance_id)

    def write(self, layout: RunLayout) -> Path:
        """Writes ``<model>.<run_id>.json``."""
        layout.output_dir.mkdir(parents=True, exist_ok=True)
        layout.summary_path.write_text(json.dumps(self.as_dict(), indent=2))
        return layout.summary_path
