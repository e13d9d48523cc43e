"""Harbor and Terminal-Bench 1 task folders on disk: their config models and the loader.

Two layouts load into one :class:`HarborTask`:

* Harbor (Terminal-Bench 2.x)::

      task-name/instruction.md  task.toml  environment/Dockerfile  solution/solve.sh  tests/test.sh

  ``task.toml`` is parsed with :mod:`tomllib` into :class:`~.schema.HarborTaskToml`, Harbor's
  own schema: a key it does not define is warned about once per load and ignored, as Harbor
  ignores it; the keys that change grading and cannot be honoured here refuse the task.
* Terminal-Bench 1::

      task-name/task.yaml  Dockerfile  docker-compose.yaml  solution.sh  run-tests.sh  tests/

  ``task.yaml`` is :class:`TB1TaskYaml` (unknown keys kept, as TB1's own model allowed).
"""

from __future__ import annotations

import glob
import logging
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gymfleet.envs.errors import TaskError
from gymfleet.envs.harbor.schema import HarborTaskToml, grading_refusal, sandbox_env, unknown_keys
from gymfleet.envs.task_files import read_text

log = logging.getLogger(__name__)

class NoSolutionError(TaskError, NotImplementedError):
    """The task has no solution script, so no gold policy (``check_env`` skips such tasks)."""


class TB1TaskYaml(BaseModel):
    """Terminal-Bench 1 ``task.yaml`` (the fields read here; others kept)."""

    model_config = ConfigDict(extra="allow")

    instruction: str = Field(min_length=1)
    max_agent_timeout_sec: float = Field(default=360.0, gt=0)
    max_test_timeout_sec: float = Field(default=60.0, gt=0)
    parser_name: str = "pytest"
    difficulty: str = "unknown"
    category: str = "software_engineering"


@dataclass(frozen=True)
class HarborTask:
    """One task folder, validated, in either layout.

    Attributes:
        name: the folder name; the env's instance id.
        path: the folder.
        layout: ``harbor`` or ``tb1``.
        instruction: the prompt.
        agent_timeout_s, verifier_timeout_s, build_timeout_s: from the task's config.
        cpus, memory_mb, storage_mb: sandbox limits.
        allow_internet: what the task asked for (the sandbox has no network regardless).
        verifier_env: extra environment of the verifier.
        context_dir: the Docker build context (``environment/``, or the TB1 folder).
        refusal: why the task cannot run here (compose with extra services, GPUs, MCP, keys that
            change grading), or None.
        extra: the other config keys, for ``info``.
        env: ``[environment.env]``, the container's variables (templates resolved).
        solution_env: ``[solution.env]``, set before the oracle's ``solve.sh``.
        notes: what ``task.toml`` asked for that is honoured otherwise here, one line each.
        unknown_keys: keys Harbor's schema does not define (warned once when loaded).
    """

    name: str
    path: Path
    layout: Literal["harbor", "tb1"]
    instruction: str
    agent_timeout_s: float
    verifier_timeout_s: float
    build_timeout_s: float
    cpus: float = 1.0
    memory_mb: int = 2048
    storage_mb: int = 10240
    allow_internet: bool = False
    verifier_env: dict[str, str] = field(default_factory=dict)
    context_dir: Path = Path()
    workdir: str | None = None
    refusal: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    solution_env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    unknown_keys: list[str] = field(default_factory=list)

    @property
    def dockerfile(self) -> Path:
        """The task's Dockerfile (may not exist: then the task is unbuildable)."""
        return self.context_dir / "Dockerfile"

    @property
    def tests_dir(self) -> Path:
        """Copied to ``/tests`` only after the agent is done."""
        return self.path / "tests"

    @property
    def test_script(self) -> Path:
        """``tests/test.sh`` (Harbor) or ``run-tests.sh`` (TB1)."""
        return self.tests_dir / "test.sh" if self.layout == "harbor" else self.path / "run-tests.sh"

    @property
    def solution_script(self) -> Path | None:
        """``solution/solve.sh`` or ``solution.sh``, when the task has one."""
        path = self.path / ("solution/solve.sh" if self.layout == "harbor" else "solution.sh")
        return path if path.is_file() else None


def load_task(path: Path, warn: bool = True) -> HarborTask:
    """Reads the task folder at ``path`` (either layout).

    Args:
        path: the task folder.
        warn: log one warning naming the ``task.toml`` keys Harbor's schema does not define
            (the caller that reports them itself, the sweep, passes False).

    Raises:
        TaskError: neither layout, a required file is missing, or the config does not validate.
    """
    if (path / "task.toml").is_file():
        return _load_harbor(path, warn)
    if (path / "task.yaml").is_file():
        return _load_tb1(path)
    raise TaskError(f"{path} is not a task folder: it has neither task.toml (Harbor) nor task.yaml (TB1)")


def _load_harbor(path: Path, warn: bool = True) -> HarborTask:
    for required in ("instruction.md", "tests/test.sh"):
        if not (path / required).is_file():
            raise TaskError(f"task {path.name!r} ({path}) has no {required}")
    try:
        config = HarborTaskToml.model_validate(tomllib.loads(_read(path, "task.toml")))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"task {path.name!r}: task.toml is not valid TOML: {exc}") from exc
    except ValidationError as exc:
        raise TaskError(f"task {path.name!r}: task.toml does not validate: {_errors(exc)}") from exc
    env = config.environment
    context = path / "environment"
    container_env, dropped = sandbox_env(env.env)
    verifier_env, dropped_v = sandbox_env(config.verifier.env)
    solution_env, dropped_s = sandbox_env(config.solution.env)
    unknown = unknown_keys(config)
    if unknown and warn:
        log.warning("task %r: task.toml keys Harbor's schema does not define, ignored: %s", path.name, ", ".join(unknown))
    return HarborTask(
        name=path.name, path=path, layout="harbor", instruction=_read(path, "instruction.md"),
        agent_timeout_s=config.agent.timeout_sec, verifier_timeout_s=config.verifier.timeout_sec,
        build_timeout_s=env.build_timeout_sec, cpus=env.cpus, memory_mb=env.memory_mb,
        storage_mb=env.storage_mb, allow_internet=env.internet, verifier_env=verifier_env,
        context_dir=context, workdir=env.workdir,
        refusal=grading_refusal(config) or _harbor_refusal(context),
        extra={k: v for k, v in (config.model_extra or {}).items()}, env=container_env,
        solution_env=solution_env, notes=_notes(config, [*dropped, *dropped_v, *dropped_s]), unknown_keys=unknown,
    )


def _notes(config: HarborTaskToml, dropped: list[str]) -> list[str]:
    """What the task asks for that this family honours in its own way (for ``info``)."""
    env, notes = config.environment, []
    modes = {config.agent.network_mode, config.verifier.network_mode, env.network_mode} - {None, "no-network"}
    if env.internet or modes or env.allowed_hosts or config.agent.allowed_hosts or config.verifier.allowed_hosts:
        notes.append("network: the task allows some network (network_mode / allowed_hosts / allow_internet); "
                     "sandboxes here have none")
    if dropped:
        notes.append(f"env: {', '.join(dropped)} name host variables, which do not enter a sandbox: left unset")
    if config.verifier.collect or config.artifacts:
        notes.append("artifacts: [[verifier.collect]] and artifacts are not collected (they do not change the reward)")
    if env.docker_image or env.image_name:
        notes.append("image: docker_image / image_name are not pulled; the Dockerfile is built")
    if env.healthcheck:
        notes.append("healthcheck: not run before the agent starts")
    return notes


def _harbor_refusal(context: Path) -> str | None:
    compose = next((p for p in (context / "docker-compose.yaml", context / "docker-compose.yml") if p.is_file()), None)
    if compose is not None:
        return f"docker-compose task ({compose.name}): multi-container tasks are not supported"
    return None


def _load_tb1(path: Path) -> HarborTask:
    for required in ("run-tests.sh",):
        if not (path / required).is_file():
            raise TaskError(f"task {path.name!r} ({path}) has no {required}")
    try:
        config = TB1TaskYaml.model_validate(yaml.safe_load(_read(path, "task.yaml")) or {})
    except yaml.YAMLError as exc:
        raise TaskError(f"task {path.name!r}: task.yaml is not valid YAML: {exc}") from exc
    except ValidationError as exc:
        raise TaskError(f"task {path.name!r}: task.yaml does not validate: {_errors(exc)}") from exc
    refusal = None
    if config.parser_name != "pytest":
        refusal = f"TB1 parser {config.parser_name!r}: only the pytest parser is supported"
    compose = path / "docker-compose.yaml"
    if compose.is_file():
        refusal = refusal or _tb1_compose_refusal(compose)
    return HarborTask(
        name=path.name, path=path, layout="tb1", instruction=config.instruction,
        agent_timeout_s=config.max_agent_timeout_sec, verifier_timeout_s=config.max_test_timeout_sec,
        build_timeout_s=600.0, allow_internet=True, context_dir=path, refusal=refusal,
        verifier_env={"TEST_DIR": "/tests"},
        extra={"difficulty": config.difficulty, "category": config.category},
    )


def _tb1_compose_refusal(compose: Path) -> str | None:
    """TB1's template compose (one ``client`` service built from the Dockerfile) is what every
    TB1 task has and is honoured as the Dockerfile alone; extra services are refused."""
    try:
        services = (yaml.safe_load(compose.read_text()) or {}).get("services") or {}
    except yaml.YAMLError as exc:
        return f"docker-compose.yaml is not valid YAML: {str(exc).splitlines()[0]}"
    if set(services) - {"client"}:
        return f"docker-compose task with services {sorted(services)}: only the single 'client' service is supported"
    return None


def _read(task: Path, name: str) -> str:
    try:
        return read_text(task, task / name)  # no link out of the task folder
    except UnicodeDecodeError as exc:
        raise TaskError(f"task {task.name!r}: {name} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
                        f"offset {exc.start}): re-save it as UTF-8") from exc


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


def task_folders(path: str | Path) -> list[Path]:
    """The task folders ``path`` names: a task folder, a folder of task folders, or a glob
    (``~`` expanded).

    Raises:
        TaskError: nothing matches.
    """
    path = os.path.expanduser(str(path))
    matches = [Path(p) for p in sorted(glob.glob(str(path)))] if any(c in str(path) for c in "*?[") else [Path(path)]
    found: list[Path] = []
    for match in matches:
        if _is_task(match):
            found.append(match)
        elif match.is_dir():
            found += sorted(p for p in match.iterdir() if _is_task(p))
    if not found:
        raise TaskError(f"no Harbor (task.toml) or TB1 (task.yaml) task folder at {path}")
    return found


def _is_task(path: Path) -> bool:
    return path.is_dir() and ((path / "task.toml").is_file() or (path / "task.yaml").is_file())


@dataclass(frozen=True)
class TaskSet:
    """The tasks a path names, and those skipped as malformed.

    Attributes:
        tasks: the valid tasks by name.
        skipped: name -> why it was skipped (one line).
    """

    tasks: dict[str, HarborTask]
    skipped: dict[str, str] = field(default_factory=dict)


def load_tasks(path: str | Path, task_ids: list[str] | None = None) -> dict[str, HarborTask]:
    """Every valid task under ``path`` by name; see :func:`load_task_set`.

    Raises:
        TaskError: as :func:`load_task_set`.
    """
    return load_task_set(path, task_ids).tasks


def load_task_set(path: str | Path, task_ids: list[str] | None = None) -> TaskSet:
    """Every task under ``path`` (see :func:`task_folders`), or only ``task_ids``, by name.

    In a folder of tasks (or a glob) a malformed task is skipped with one warning naming it and
    why (kept in :attr:`TaskSet.skipped`), so that one bad task does not block a corpus; a task
    named in ``task_ids``, or the one task ``path`` names, is not skipped.

    Raises:
        TaskError: no task, no valid task, a named task is missing or malformed, or two folders
            share a name.
    """
    folders = task_folders(path)
    by_name: dict[str, Path] = {}
    for folder in folders:
        if folder.name in by_name:
            raise TaskError(f"two task folders are named {folder.name!r}: {by_name[folder.name]} and {folder}")
        by_name[folder.name] = folder
    if task_ids is not None:
        missing = [t for t in task_ids if t not in by_name]
        if missing:
            raise TaskError(f"no task {', '.join(map(repr, missing))} at {path}; known: {', '.join(sorted(by_name)[:20])}")
        by_name = {t: by_name[t] for t in task_ids}
    if task_ids is not None or _is_task(Path(os.path.expanduser(str(path)))):
        return TaskSet({name: load_task(folder) for name, folder in sorted(by_name.items())})
    tasks: dict[str, HarborTask] = {}
    skipped: dict[str, str] = {}
    for name, folder in sorted(by_name.items()):
        try:
            tasks[name] = load_task(folder)
        except TaskError as exc:
            skipped[name] = " ".join(str(exc).split()).removeprefix(f"task {name!r}: ")
            log.warning("skipping task %r: %s", name, skipped[name])
    if not tasks:
        raise TaskError(f"no valid task at {path}: {len(skipped)} invalid, e.g. task {next(iter(skipped))!r}: "
                        f"{next(iter(skipped.values()))}")
    return TaskSet(tasks, skipped)
