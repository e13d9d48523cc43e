"""Model predictions in SWE-bench's format, and the two built-in ones: ``gold`` and ``empty``.

A predictions file is JSON Lines (or a JSON array, or a JSON object keyed by instance id) of
``{"instance_id", "model_name_or_path", "model_patch"}``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from gymfleet.envs.swe.errors import InstanceLoadError
from gymfleet.envs.swe.instances import SWEInstance

BUILTIN_PREDICTIONS = ("gold", "empty")


class Prediction(BaseModel):
    """One model's patch for one instance."""

    instance_id: str
    """The instance the patch is for."""
    model_name_or_path: str = "unknown"
    """Names the model; reports are grouped by it."""
    model_patch: str | None = None
    """Unified diff against the base commit; empty or None means no patch."""

    @property
    def is_empty(self) -> bool:
        """True when there is no patch to apply."""
        return not (self.model_patch or "").strip()


def load_predictions(source: str | Path, instances: Sequence[SWEInstance]) -> dict[str, Prediction]:
    """Predictions keyed by instance id.

    Args:
        source: ``"gold"`` (each instance's own ``patch``), ``"empty"`` (no patch), or a file.
        instances: the instances being evaluated (used by ``gold`` / ``empty``).

    Raises:
        InstanceLoadError: unreadable file, a malformed row, or a duplicate instance id.
    """
    if str(source) == "gold":
        return {i.instance_id: Prediction(instance_id=i.instance_id, model_name_or_path="gold",
                                          model_patch=i.patch) for i in instances}
    if str(source) == "empty":
        return {i.instance_id: Prediction(instance_id=i.instance_id, model_name_or_path="empty",
                                          model_patch="") for i in instances}
    path = Path(source)
    try:
        text = path.read_text()
        stripped = text.lstrip()
        if stripped.startswith("["):
            rows = json.loads(text)
        elif stripped.startswith("{") and path.suffix == ".json":
            data = json.loads(text)
            rows = list(data.values()) if "instance_id" not in data else [data]
        else:
            rows = [_json_line(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    except (OSError, ValueError) as exc:
        raise InstanceLoadError(
            f"cannot read predictions {path}: {exc}; pass a JSONL file, `gold` or `empty`"
        ) from exc
    predictions: dict[str, Prediction] = {}
    for n, row in enumerate(rows):
        try:
            pred = Prediction.model_validate(row)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "row"
            raise InstanceLoadError(
                f"{path}: prediction {n} is malformed: {where}: {first['msg']} (got "
                f"{type(first.get('input')).__name__}); each row is an object with string "
                "instance_id, model_name_or_path and model_patch") from exc
        if pred.instance_id in predictions:
            raise InstanceLoadError(f"{path}: two predictions for {pred.instance_id}")
        predictions[pred.instance_id] = pred
    return predictions


def check_known(predictions: dict[str, Prediction], instances: Sequence[SWEInstance]) -> None:
    """Refuses predictions for instances the dataset lacks, as swebench's ``run_evaluation``
    does (``Some prediction IDs not found in dataset``), in one bounded line.

    Raises:
        InstanceLoadError: some prediction names an unknown instance (how many, the first five).
    """
    known = {i.instance_id for i in instances}
    unknown = [i for i in predictions if i not in known]
    if unknown:
        shown = ", ".join(repr(i[:80]) for i in unknown[:5])
        raise InstanceLoadError(
            f"{len(unknown)} of {len(predictions)} predictions name instances not in the dataset "
            f"(first: {shown}{', ...' if len(unknown) > 5 else ''}); pass the dataset they were "
            "made for, or --instance-ids to grade some of them")


def _json_line(number: int, line: str) -> Any:
    """One JSONL row; a malformed one raises ValueError naming its line number (from 1)."""
    try:
        return json.loads(line)
    except ValueError as exc:
        raise ValueError(f"line {number} is not JSON ({exc})") from exc


SWE_ENV_ID = "gymfleet/SWE-v0"


def predictions_from_trajectories(trajectories: Sequence[Any], run_id: str,
                                  every: bool = False) -> list[Prediction]:
    """A run's ``gymfleet/SWE-v0`` patches as SWE-bench predictions.

    Args:
        trajectories: the run's trajectories (``core.records.Trajectory``: ``env_id``,
            ``instance_id``, ``reward``, ``rollout_id`` and ``metrics["patch"]``, the diff the
            env graded).
        run_id: names the model: ``gymfleet/<run_id>``.
        every: all patches, each with a distinct model name ``gymfleet/<run_id>@<rollout_id>``;
            otherwise one per instance, the best-rewarded (the latest among equals).

    Returns:
        Predictions in instance order of first appearance; trajectories without a patch (the
        episode never submitted) are left out.
    """
    best: dict[str, tuple[float, int, Prediction]] = {}
    out: list[Prediction] = []
    for n, traj in enumerate(trajectories):
        patch = (traj.metrics or {}).get("patch")
        if traj.env_id != SWE_ENV_ID or patch is None:
            continue
        if every:
            out.append(Prediction(instance_id=traj.instance_id, model_patch=patch,
                                  model_name_or_path=f"gymfleet/{run_id}@{traj.rollout_id}"))
            continue
        pred = Prediction(instance_id=traj.instance_id, model_patch=patch,
                          model_name_or_path=f"gymfleet/{run_id}")
        seen = best.get(traj.instance_id)
        if seen is None or (traj.reward, n) >= seen[:2]:
            best[traj.instance_id] = (float(traj.reward), n, pred)
    return out if every else [p for _, _, p in best.values()]


def write_predictions(predictions: Sequence[Prediction], path: Path) -> int:
    """Writes SWE-bench predictions JSONL; returns how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(p.model_dump_json() + "\n" for p in predictions))
    return len(predictions)
