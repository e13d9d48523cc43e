"""Harbor and Terminal-Bench 1 task folders on disk: their config models and the loader.

Two layouts load into one :class:`HarborTask`:

* Harbor (Terminal-Bench 2.x)::

      task-name/instruction.md  task.toml  environment/Dockerfile  solution/solve.sh  tests/test.sh

  ``task.toml`` is parsed with :mod:`tomllib` into :class:`HarborTaskToml`. The sections this
  family acts on (``[agent]``, ``[environment]``, ``[verifier]``) are strict: an unknown key in
  them is an error, since silently ignoring a limit would grade differently from Harbor. Other
  sections (``[metadata]``, ``[task]``, ``[solution]``...) are kept as given and not read: Harbor
  adds sections as it evolves, and none of them changes how a task is built or graded here.
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
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gymfleet.envs.errors import TaskError
from gymfleet.envs.task_files import read_text

log = logging.getLogger(__name__)

class NoSolutionError(TaskError, NotImplementedError):
    """The task has no solution script, so no gold policy (``check_env`` skips such tasks)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentSection(_Strict):
    """``[agent]`` of ``task.toml``."""

    timeout_sec: float = Field(default=600.0, gt=0)
    """Seconds the agent's commands may run in all (model time not counted here)."""
    user: str | None = None
    """User the agent runs as (informative: commands run as the image's user)."""


class EnvironmentSection(_Strict):
    """``[environment]`` of ``task.toml``."""

    build_timeout_sec: float = Field(default=600.0, gt=0)
    """Seconds the image build may take."""
    docker_image: str | None = None
    """A prebuilt image Harbor would pull instead of building; unused here (nothing is pulled)."""
    cpus: float = Field(default=1.0, gt=0)
    """CPU limit of the sandbox, cores."""
    memory_mb: int = Field(default=2048, ge=64)
    """Memory limit of the sandbox, MiB."""
    storage_mb: int = Field(default=10240, ge=1)
    """Writable space of the sandbox, MiB (the sandbox's ``disk_mb``)."""
    memory: str | None = None
    """Memory limit with a unit (``"2G"``, ``"512M"``), as TB2's task files give it; when set it
    replaces ``memory_mb`` (as in Harbor, which keeps it beside ``memory_mb`` for old tasks)."""
    storage: str | None = None
    """Writable space with a unit (``"10G"``); when set it replaces ``storage_mb``."""
    gpus: int = Field(default=0, ge=0)
    """GPUs the task needs; a task asking for any is refused."""
    gpu_types: list[str] | None = None
    """GPU models the task accepts (Harbor's scheduling hint); read only with ``gpus`` > 0, which
    is refused anyway."""
    allow_internet: bool = True
    """Harbor's default; here every sandbox runs without network (``info`` says so)."""
    workdir: str | None = None
    """Working directory of the agent; default: the image's WORKDIR."""
    healthcheck: Any = None
    """Harbor's container health check; not run here."""
    mcp_servers: list[Any] = Field(default_factory=list)
    """MCP servers of the task; a task listing any is refused."""
    skills_dir: str | None = None
    """Harbor's skills folder; unused."""

    @field_validator("memory", "storage")
    @classmethod
    def _has_a_unit(cls, value: str | None) -> str | None:
        if value is not None:
            size_to_mb(value)
        return value

    @model_validator(mode="after")
    def _sizes_in_mb(self) -> EnvironmentSection:
        if self.memory is not None:
            self.memory_mb = max(size_to_mb(self.memory), 64)
        if self.storage is not None:
            self.storage_mb = max(size_to_mb(self.storage), 1)
        return self


_UNITS_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def size_to_mb(size: str) -> int:
    """``"2G"`` -> 2048: a size with a unit (K, M, G or T, optionally followed by ``B`` or ``i``,
    binary multiples as in Harbor) in MiB, rounded down.

    Raises:
        ValueError: no number or no known unit (the message gives the accepted form).
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT])(?:i?B?)\s*", size.upper())
    if match is None:
        raise ValueError(f"{size!r} is not a size: write a number and a unit, e.g. '2G' or '512M'")
    return int(float(match.group(1)) * _UNITS_MB[match.group(2)])


class VerifierSection(_Strict):
    """``[verifier]`` of ``task.toml``."""

    timeout_sec: float = Field(default=600.0, gt=0)
    """Seconds ``tests/test.sh`` may run."""
    user: str | None = None
    """User the verifier runs as (informative)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of the verifier (``[verifier.env]``)."""


class HarborTaskToml(BaseModel):
    """``task.toml``: the three sections read here are strict; others are kept, unread."""

    model_config = ConfigDict(extra="allow")

    version: str = "1.0"
    agent: AgentSection = Field(default_factory=AgentSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)


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
        refusal: why the task cannot run here (compose with extra services, GPUs, MCP), or None.
        extra: the other config keys, for ``info``.
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


def load_task(path: Path) -> HarborTask:
    """Reads the task folder at ``path`` (either layout).

    Raises:
        TaskError: neither layout, a required file is missing, or the config does not validate.
    """
    if (path / "task.toml").is_file():
        return _load_harbor(path)
    if (path / "task.yaml").is_file():
        return _load_tb1(path)
    raise TaskError(f"{path} is not a task folder: it has neither task.toml (Harbor) nor task.yaml (TB1)")


def _load_harbor(path: Path) -> HarborTask:
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
    return HarborTask(
        name=path.name, path=path, layout="harbor", instruction=_read(path, "instruction.md"),
        agent_timeout_s=config.agent.timeout_sec, verifier_timeout_s=config.verifier.timeout_sec,
        build_timeout_s=env.build_timeout_sec, cpus=env.cpus, memory_mb=env.memory_mb,
        storage_mb=env.storage_mb, allow_internet=env.allow_internet, verifier_env=config.verifier.env,
        context_dir=context, workdir=env.workdir, refusal=_harbor_refusal(env, context),
        extra=dict(config.model_extra or {}),
    )


def _harbor_refusal(env: EnvironmentSection, context: Path) -> str | None:
    if env.gpus:
        return f"needs {env.gpus} GPU(s); sandboxes here have none"
    if env.mcp_servers:
        return "needs MCP servers, which this family does not start"
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


def load_tasks(path: str | Path, task_ids: list[str] | None = None) -> dict[str, HarborTask]:
    """Every task under ``path`` (see :func:`task_folders`), or only ``task_ids``, by name.

    In a folder of tasks (or a glob) a malformed task is skipped with one warning naming it and
    why, so that one bad task does not block a corpus; a task named in ``task_ids``, or the one
    task ``path`` names, is not skipped.

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
        return {name: load_task(folder) for name, folder in sorted(by_name.items())}
    tasks: dict[str, HarborTask] = {}
    invalid: list[str] = []
    for name, folder in sorted(by_name.items()):
        try:
            tasks[name] = load_task(folder)
        except TaskError as exc:
            reason = " ".join(str(exc).split())
            invalid.append(reason)
            log.warning("skipping task %r: %s", name, reason.removeprefix(f"task {name!r}: "))
    if not tasks:
        raise TaskError(f"no valid task at {path}: {len(invalid)} invalid, e.g. {invalid[0]}")
    return tasks
