"""Briefs: what a deck must be about, who it is for, what it must say, and how long it is."""

from __future__ import annotations

import re
import unicodedata
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from gymfleet.envs.errors import TaskError
from gymfleet.envs.slides.errors import BriefError
from gymfleet.envs.task_files import read_text


def normalize(text: str) -> str:
    """Lower case, accents dropped, every run of non-alphanumerics one space: how a brief's
    points are matched against a slide's text."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    return " ".join(re.findall(r"[^\W_]+", text))


class Brief(BaseModel):
    """One task instance of ``gymfleet/Slides-v0``, loaded from ``briefs/<id>.yaml``."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """Instance id; the gold deck is ``briefs/gold/<id>.html``."""
    topic: str
    """What the deck is about (one line)."""
    audience: str
    """Who will watch it; sets tone and depth."""
    n_slides: int = Field(ge=1, le=30)
    """Exact number of slides the deck must have."""
    points: list[str] = Field(min_length=1)
    """Phrases that must each appear as visible, legible text on some slide (matched ignoring
    case, accents, punctuation and spacing, but word for word)."""
    notes: str = ""
    """Extra guidance for the author (optional)."""

    @field_validator("points")
    @classmethod
    def _points_have_words(cls, points: list[str]) -> list[str]:
        empty = [p for p in points if not normalize(p)]
        if empty:
            raise ValueError(f"points without any letter or digit: {empty}")
        return points

    def prompt(self) -> str:
        """The brief as the agent reads it."""
        points = "\n".join(f"  - {p}" for p in self.points)
        notes = f"\nNotes: {self.notes}" if self.notes else ""
        return (
            f"Brief {self.id}\nTopic: {self.topic}\nAudience: {self.audience}\n"
            f"Slides: exactly {self.n_slides}\n"
            f"Each of these points must appear word for word as visible text on some slide:\n"
            f"{points}{notes}"
        )


def default_briefs_dir() -> Path:
    """The briefs shipped with gymfleet (``envs/slides/briefs``)."""
    return Path(str(resources.files("gymfleet.envs.slides").joinpath("briefs")))


def load_briefs(briefs_dir: Path | None = None) -> dict[str, Brief]:
    """Every ``*.yaml`` brief in ``briefs_dir`` (default: the shipped ones), keyed by id.

    Raises:
        BriefError: a file is not valid YAML, does not match :class:`Brief`, its ``id`` is not
            its file name, two briefs share an id, or it is a link out of the folder.
    """
    folder = briefs_dir or default_briefs_dir()
    briefs: dict[str, Brief] = {}
    for path in sorted(folder.glob("*.yaml")):
        try:
            brief = Brief.model_validate(yaml.safe_load(_read(folder, path)))
        except (yaml.YAMLError, ValidationError) as exc:
            raise BriefError(f"{path}: not a valid brief, fix the file: {exc}") from exc
        if brief.id != path.stem:
            raise BriefError(f"{path}: id {brief.id!r} must equal the file name {path.stem!r}")
        briefs[brief.id] = brief
    if not briefs:
        raise BriefError(f"no *.yaml briefs in {folder}")
    return briefs


def gold_deck(brief_id: str, briefs_dir: Path | None = None) -> str:
    """The gold deck's HTML for ``brief_id``.

    Raises:
        BriefError: ``briefs/gold/<id>.html`` is missing or a link out of the briefs folder.
    """
    path = (briefs_dir or default_briefs_dir()) / "gold" / f"{brief_id}.html"
    if not path.is_file():
        raise BriefError(f"gold deck {path} is missing: write it (see envs/slides/README.md)")
    return _read(path.parent.parent, path)


def _read(folder: Path, path: Path) -> str:
    try:
        return read_text(folder, path)  # no link out of the briefs folder
    except TaskError as exc:
        raise BriefError(str(exc)) from exc
