"""What a trajectory's env left to look at, read from its metrics (the env's final ``info``).

* browser (``screenshot_path``): the PNG of every turn of the episode, ``turn-NN.png`` beside it;
* slides (``png_dir``, also under ``volatile``): ``slide-NN.png`` of the submitted deck, and the
  deck's source (served as text);
* SWE (``patch``, ``report``): the agent's diff and the harness's test results, shown inline;
* graders' own output (``grading``, ``grading_error``, ``error``, ``report``) and an infra error's
  class (the trajectory's status and reason, ``close_error``, ``engine_outage``).

A path the metrics name outside the run's folders is listed, not served (``ref`` None). A picture
written after the trajectory was stored is marked ``later``: the browser env keeps one folder per
instance and empties it at each reset, so a later rollout of the same instance (another sample of
its group) replaced what this one saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gymfleet.view.folders import FileRef, RunFolders

PICTURES_PER_FOLDER = 100
LATER_SLACK_S = 2.0
"""A picture this many seconds newer than its trajectory's row is a later rollout's (the row is
written after the episode ends, in a batch)."""
GRADER_KEYS = ("report", "grading", "grading_error", "error", "raw_reward", "success", "reason", "tests")
"""Metrics keys that hold a grader's output (shown as the grader's section)."""
INFRA_KEYS = ("close_error", "engine_outage", "infra_error", "error_class")


@dataclass(frozen=True)
class Artifact:
    """One file an env wrote for people: a picture or a text."""

    kind: str
    """``screenshot``, ``slide`` or ``text``."""
    label: str
    ref: FileRef | None
    """Where the viewer serves it from; None: outside the run's folders (not served)."""
    path: str
    """As the metrics name it."""
    later: bool = False
    """Written after the trajectory was stored: a later rollout's, not this one's."""


@dataclass(frozen=True)
class Artifacts:
    """Everything of one trajectory that is not a message or a token."""

    files: list[Artifact] = field(default_factory=list)
    patch: str | None = None
    """A SWE patch (unified diff)."""
    grader: dict[str, Any] = field(default_factory=dict)
    infra: dict[str, Any] = field(default_factory=dict)


def artifacts_of(metrics: dict[str, Any], folders: RunFolders, stored_at: datetime | None = None) -> Artifacts:
    """The artifacts a trajectory's metrics name (see the module docstring).

    Args:
        stored_at: when the trajectory was stored; pictures written after it are marked ``later``.
    """
    raw = metrics.get("volatile")
    volatile: dict[str, Any] = raw if isinstance(raw, dict) else {}
    files: list[Artifact] = []
    shot = metrics.get("screenshot_path") or volatile.get("screenshot_path")
    if isinstance(shot, str) and shot:
        files += _pictures(Path(shot).parent, "turn-*.png", "screenshot", folders, fallback=shot, stored_at=stored_at)
    png_dir = metrics.get("png_dir") or volatile.get("png_dir")
    if isinstance(png_dir, str) and png_dir:
        files += _pictures(Path(png_dir), "slide-*.png", "slide", folders, stored_at=stored_at)
        deck = Path(png_dir) / "deck.html"
        files.append(Artifact("text", "deck.html (source, as text)", folders.ref(deck), str(deck)))
    patch = metrics.get("patch") if isinstance(metrics.get("patch"), str) else None
    grader = {k: metrics[k] for k in GRADER_KEYS if k in metrics}
    infra = {k: metrics[k] for k in INFRA_KEYS if k in metrics}
    return Artifacts(files=files, patch=patch, grader=grader, infra=infra)


def _pictures(folder: Path, pattern: str, kind: str, folders: RunFolders, fallback: str | None = None,
              stored_at: datetime | None = None) -> list[Artifact]:
    ref = folders.ref(folder / "x.png")
    if ref is None:  # outside the run's folders: named, never listed or served
        return [Artifact(kind, Path(fallback or folder).name, None, fallback or str(folder))]
    try:
        found = sorted(folder.glob(pattern))[:PICTURES_PER_FOLDER] if folder.is_dir() else []
    except OSError:
        found = []
    if not found and fallback:
        found = [Path(fallback)]
    return [Artifact(kind, p.name, folders.ref(p), str(p), _after(p, stored_at)) for p in found]


def _after(path: Path, stored_at: datetime | None) -> bool:
    try:
        return stored_at is not None and path.stat().st_mtime > stored_at.timestamp() + LATER_SLACK_S
    except OSError:
        return False
