"""Terminal tasks on disk: the ``task.yaml`` model and the loader of a tasks folder.

A task is a folder ``<tasks_dir>/<task_id>/`` holding ``task.yaml`` (:class:`TerminalTaskConfig`),
``solution.sh`` (the gold solution), ``tests/run.sh`` (the hidden grader), and optionally
``setup.sh`` (run before the agent starts) and ``files/`` (copied into the working directory).
See ``envs/terminal/README.md`` for the whole format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError

from gymfleet.core.strict import StrictModel
from gymfleet.envs.errors import TaskError
from gymfleet.envs.task_files import read_text, refuse_links

BUILTIN_TASKS_DIR = Path(__file__).resolve().parent / "tasks"
"""The tasks shipped with gymfleet."""

TASK_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


class TerminalTaskConfig(StrictModel):
    """The contents of one ``task.yaml``."""

    instruction: str = Field(min_length=1)
    """What the agent is asked to do, shown as the first observation."""
    difficulty: Literal["easy", "medium", "hard"] = "medium"
    """How hard a person would find it."""
    category: str = "general"
    """A short topic label (``files``, ``git``, ``python``, ``sql``, ``build``, ``service``...)."""
    tags: list[str] = Field(default_factory=list)
    """Free-form labels."""
    image: str = "terminal"
    """Image folder under ``images/`` the Docker backend runs (``gymfleet/<image>:latest``)."""
    network: bool = False
    """Network access for the agent and the tests. Off unless the task needs it."""
    max_agent_turns: int = Field(default=30, ge=1)
    """Agent turns before the episode is truncated (the tests still grade the end state)."""
    agent_timeout_s: float = Field(default=600.0, gt=0)
    """Total seconds the agent's commands may run in the sandbox (model time not counted)."""
    timeout_s: float = Field(default=60.0, gt=0)
    """Seconds one agent command may run before its process tree is killed."""
    setup_timeout_s: float = Field(default=120.0, gt=0)
    """Seconds ``setup.sh`` may run."""
    test_timeout_s: float = Field(default=120.0, gt=0)
    """Seconds ``tests/run.sh`` may run; past it the grading fails (reward 0)."""
    requires: list[str] = Field(default_factory=list)
    """Commands the sandbox must provide (checked at reset; the local backend runs the host's)."""


@dataclass(frozen=True)
class Task:
    """One task folder, validated.

    Attributes:
        task_id: the folder name; the env's instance id.
        path: the folder.
        config: the parsed ``task.yaml``.
    """

    task_id: str
    path: Path
    config: TerminalTaskConfig

    @property
    def solution_script(self) -> str:
        """The gold solution's text."""
        return read_text(self.path, self.path / "solution.sh")

    @property
    def setup_script(self) -> str | None:
        """The text of ``setup.sh``, or None when the task has none."""
        setup = self.path / "setup.sh"
        return read_text(self.path, setup) if setup.is_file() else None

    @property
    def tests_dir(self) -> Path:
        """The hidden tests, copied into the sandbox only after the agent finishes."""
        return self.path / "tests"

    @property
    def files_dir(self) -> Path:
        """Files copied into the working directory at reset (may not exist)."""
        return self.path / "files"


def load_task(path: Path) -> Task:
    """Reads and validates the task folder at ``path``.

    Raises:
        TaskError: a required file is missing, ``task.yaml`` does not validate, or a link in the
            folder points out of it (or to a folder).
    """
    task_id = path.name
    if not TASK_ID_PATTERN.match(task_id):
        raise TaskError(f"task folder {path}: name must match {TASK_ID_PATTERN.pattern}; rename it")
    refuse_links(path)
    for required in ("task.yaml", "solution.sh", "tests/run.sh"):
        if not (path / required).is_file():
            raise TaskError(f"task {task_id!r} ({path}) has no {required}: add it (see envs/terminal/README.md)")
    try:
        raw = yaml.safe_load(read_text(path, path / "task.yaml"))
        config = TerminalTaskConfig.model_validate(raw if raw is not None else {})
    except yaml.YAMLError as exc:
        raise TaskError(f"task {task_id!r}: task.yaml is not valid YAML: {exc}") from exc
    except ValidationError as exc:
        raise TaskError(f"task {task_id!r}: task.yaml does not validate, fix these fields:\n{exc}") from exc
    return Task(task_id=task_id, path=path, config=config)


def load_tasks(tasks_dir: Path, task_ids: list[str] | None = None) -> dict[str, Task]:
    """Every task under ``tasks_dir`` (or only ``task_ids``), keyed and sorted by id.

    Raises:
        TaskError: the folder does not exist or holds no task, a named task is missing, or a
            task is malformed.
    """
    if not tasks_dir.is_dir():
        raise TaskError(f"tasks folder {tasks_dir} does not exist: pass an existing tasks_dir")
    found = sorted(p for p in tasks_dir.iterdir() if p.is_dir() and (p / "task.yaml").exists())
    if task_ids is not None:
        names = {p.name for p in found}
        missing = [t for t in task_ids if t not in names]
        if missing:
            raise TaskError(
                f"no task {', '.join(map(repr, missing))} in {tasks_dir}; known: {', '.join(sorted(names))}"
            )
        found = [p for p in found if p.name in set(task_ids)]
    if not found:
        raise TaskError(f"no task folder (with a task.yaml) in {tasks_dir}")
    return {p.name: load_task(p) for p in found}
