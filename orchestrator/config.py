"""The run config: one YAML file describing tasks, concurrency, staleness, policy and store.

Loaded by :func:`load_run_config` with ``KEY.PATH=VALUE`` command-line overrides; the resolved
config (every default filled in) is written into the run's row in the store. Every model is a
:class:`~gymfleet.core.strict.StrictModel`: an unknown key at any depth is an error naming the
nearest valid key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from gymfleet.core.errors import ConfigError
from gymfleet.core.models import ModelSpec
from gymfleet.core.records import SamplingParams
from gymfleet.core.strict import StrictModel, validation_problems
from gymfleet.envs.resources import ResourcesConfig
from gymfleet.orchestrator.engines.config import EngineConfig, TransformersEngineConfig
from gymfleet.orchestrator.parity import ParityConfig
from gymfleet.orchestrator.router import RouterConfig
from gymfleet.orchestrator.run_settings import RunSampling, check_turn_limit, resolve_sampling

__all__ = [
    "AutoMixConfig", "PolicyConfig", "RunConfig", "RunSampling", "ShutdownConfig", "TaskConfig",
    "apply_override", "load_run_config", "read_config_document", "validation_problems",
]


class TaskConfig(StrictModel):
    """One task of the mix: an env, which instances, and how to sample them."""

    env_id: str
    """Registered env id (``gymfleet/Terminal-v0``), or ``module:env-id`` to import the module
    that registers it first (Gymnasium's convention)."""
    name: str = ""
    """Short name in progress, metrics and the store; defaults to the env id."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the env constructor."""
    instances: list[str] | None = None
    """Instance ids to run, in order; None: every id the env lists (``instance_ids()``)."""
    instances_file: Path | None = None
    """A text file of instance ids, one a line (``#`` comments); used when ``instances`` is None."""
    max_instances: int | None = Field(default=None, ge=1)
    """Keep only the first N instances."""
    exclude_instances: list[str] = Field(default_factory=list)
    """Instance ids this task never runs, removed before ``max_instances`` cuts the list (a training
    run fills it with the task's held-out instances, ``heldout:`` in docs/train.md)."""
    weight: float = Field(default=1.0, ge=0.0)
    """Share of completed rollouts, relative to the other tasks' weights (changeable live)."""
    group_size: int = Field(default=4, ge=1)
    """G, samples per instance (one GRPO group)."""
    passes: int | None = Field(default=1, ge=1)
    """Times over the instance list; None: forever (training)."""
    max_in_flight: int | None = Field(default=None, ge=1)
    """Per-task cap on concurrent rollouts (e.g. heavy sandboxes); None: only the global cap."""
    max_turns: int = Field(default=30, ge=1)
    """Agent turns before the rollout is cut (status truncated): the task's one turn limit (the env
    is told it at reset; an ``env_kwargs.max_turns`` that differs is refused)."""
    turn_timeout_s: float = Field(default=300.0, gt=0)
    """Seconds one turn (generation and env step) may take before the rollout is truncated."""
    rollout_timeout_s: float = Field(default=1800.0, gt=0)
    """Seconds a whole rollout (reset included) may take before it is truncated."""
    max_attempts: int = Field(default=3, ge=1)
    """Attempts per sample when infrastructure fails (infra_error); then the failure is final."""
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    """Sampling settings of every turn: ``max_new_tokens``, ``stop``; its temperature and top_p
    are the run's ``sampling`` (written in when the run is read; setting them here is deprecated)."""

    @property
    def registered_id(self) -> str:
        """The env id without its ``module:`` prefix (what trajectories record)."""
        return self.env_id.rpartition(":")[2]

    @model_validator(mode="after")
    def _default_name(self) -> TaskConfig:
        if not self.name:
            self.name = self.env_id.rsplit(":", 1)[-1]
        return self


class PolicyConfig(StrictModel):
    """The policy the rollouts talk to: a gateway over one or more engines."""

    kind: str = "embedded"
    """Builder name: ``embedded`` (the TITO gateway over ``engines``), ``import`` (``factory``)."""
    factory: str | None = None
    """``module:callable`` returning a PolicyGateway (or an async context manager of one);
    called with ``options`` as keyword arguments. Used when ``kind: import``."""
    model: ModelSpec = Field(default_factory=ModelSpec)
    """The base model the engines serve and the learner trains: a name or path (``embedded``,
    the default, is SmolLM2-135M-Instruct), or a ModelSpec mapping."""
    engines: list[EngineConfig] = Field(default_factory=list)
    """Engine replicas behind the router, each told apart by ``kind``:
    ``{kind: transformers, max_batch_size: 16, ...}`` (TransformersEngineConfig; its ``source``
    is ``model``), ``{kind: vllm, base_url: http://host:8000, model: NAME}`` or ``{kind: vllm,
    launch: true, replicas: 2}`` (VLLMEngineConfig; docs/vllm.md); empty: one in-process
    TransformersEngine."""
    parity: ParityConfig = Field(default_factory=ParityConfig)
    """The start-up train/inference parity check of HTTP replicas (bound, refuse or warn)."""
    router: RouterConfig | None = None
    """How the router calls its replicas; None: its defaults (for in-process engines only, no
    per-request limit: the task's ``turn_timeout_s`` bounds a slow turn)."""
    adapter: str | None = None
    """A PEFT adapter folder to sample from (published as version ``adapter_version``); None:
    the base model."""
    adapter_version: int = Field(default=1, ge=1)
    """The policy version ``adapter`` is published as."""
    options: dict[str, Any] = Field(default_factory=dict)
    """For ``kind: import``: the factory's keyword arguments."""

    @model_validator(mode="after")
    def _engines_serve_the_model(self) -> PolicyConfig:
        engines = []
        for i, engine in enumerate(self.engines):
            if isinstance(engine, TransformersEngineConfig):
                if "source" in engine.model_fields_set and not engine.source.same_weights(self.model):
                    raise ValueError(
                        f"engines.{i}.source is {engine.source} but policy.model is {self.model}: every engine "
                        f"serves policy.model; set policy.model and drop engines.{i}.source")
                update: dict[str, Any] = {"source": self.model}
                if "name" not in engine.model_fields_set:
                    update["name"] = f"local-{i}"
                engine = engine.model_copy(update=update)
            engines.append(engine)
        self.engines = engines
        return self


class AutoMixConfig(StrictModel):
    """Automatic task mix: more share to tasks whose groups still disagree."""

    enabled: bool = False
    """Shift share toward tasks with non-zero reward variance within groups."""
    floor: float = Field(default=0.1, ge=0.0, le=1.0)
    """Each task keeps at least this fraction of its configured weight."""
    window_groups: int = Field(default=32, ge=1)
    """Recent complete groups per task the estimate looks at."""


class ShutdownConfig(StrictModel):
    """What Ctrl-C / SIGTERM does to in-flight rollouts."""

    mode: Literal["finish", "abort"] = "finish"
    """finish: let in-flight rollouts end (until the deadline); abort: cancel them at once."""
    deadline_s: float = Field(default=60.0, ge=0.0)
    """Seconds to wait for in-flight rollouts; the rest are aborted (sandboxes released)."""


class RunConfig(StrictModel):
    """A whole run, loaded from one YAML file."""

    run_id: str = Field(..., min_length=1, max_length=120, pattern=r"^[A-Za-z0-9._-]+$")
    """Names the run; starting a config with an existing run id resumes that run. It names
    folders (``runs/{run_id}/...``), so it is one path component: letters, digits, ``._-``, and
    not ``.`` or ``..``."""
    store: str = "runs/{run_id}/store.db"
    """Store URL (``sqlite:///``, a path, or ``postgresql://``); ``{run_id}`` is filled in."""
    max_in_flight: int = Field(default=1024, ge=1)
    """Global cap on concurrent rollouts."""
    max_staleness: int | None = Field(default=None, ge=0)
    """Most policy versions a sample may lag (:func:`gymfleet.core.records.staleness`: the
    version now minus the version that generated its oldest token). The learner drops samples
    staler than this; the scheduler stops admitting while an in-flight rollout already lags the
    newest loaded version by more (its samples would be dropped). In a training config the
    learner gets it too (:class:`~gymfleet.trainer.rollout_policy.RolloutPolicy`; 4 when unset).
    None: no bound (collection)."""
    quarantine_after: int = Field(default=5, ge=1)
    """Consecutive infra_error rollouts of a task that quarantine it."""
    lease_s: float = Field(default=60.0, gt=0)
    """Seconds this orchestrator's hold on the samples it claimed lasts unless renewed (its
    heartbeat renews every ``lease_s / 3``). Another orchestrator on the run requeues the samples
    of one that died once this runs out (at once, on its start, when the dead one ran on the same
    host); on SQLite it is also how long a killed orchestrator's run stays refused to a second
    one on another host. Rollouts running longer than this are fine; an event loop stalled for
    longer is not."""
    auto_mix: AutoMixConfig = Field(default_factory=AutoMixConfig)
    shutdown: ShutdownConfig = Field(default_factory=ShutdownConfig)
    metrics_path: str = "runs/{run_id}/metrics.jsonl"
    """Metrics snapshots, one JSON object a line; ``{run_id}`` is filled in."""
    metrics_interval_s: float = Field(default=5.0, gt=0)
    """Seconds between metrics snapshots (and config re-reads for live weight changes)."""
    seed: int = 0
    """Base seed; each turn's sampling seed derives from it, the rollout id and the turn index
    (``gymfleet.core.sampling.turn_seed``)."""
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    """The policy: a gateway over engines serving ``policy.model``."""
    sampling: RunSampling = Field(default_factory=RunSampling)
    """The run's sampling distribution (temperature, top_p): every task samples with it and a
    training run's learner computes logprobs under it (:mod:`gymfleet.orchestrator.run_settings`)."""
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    """The envs' shared resources: sandbox backend, warm pools, the reaper's period."""
    tasks: list[TaskConfig] = Field(..., min_length=1)

    @field_validator("run_id")
    @classmethod
    def _one_folder(cls, run_id: str) -> str:
        if not run_id.strip("."):
            raise ValueError(f"run id {run_id!r} would name a folder outside runs/: pick a name with a letter or digit")
        return run_id

    @model_validator(mode="before")
    @classmethod
    def _one_owner(cls, data: Any) -> Any:
        """One sampling distribution and one turn limit per task (contradictions refused)."""
        if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
            return data
        if not isinstance(data.get("sampling"), dict | BaseModel | None):
            return data  # the field's own error names it
        default_turns = TaskConfig.model_fields["max_turns"].default
        for i, task in enumerate(data["tasks"]):
            check_turn_limit(i, task, default_turns)
        return resolve_sampling(data)

    @model_validator(mode="after")
    def _unique_task_names(self) -> RunConfig:
        names = [t.name for t in self.tasks]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"task names must be unique, repeated: {dupes}; set `name:` on each")
        if not any(t.weight > 0 for t in self.tasks):
            raise ValueError("at least one task needs weight > 0")
        self.store = fill_run_id(self.store, self.run_id)
        self.metrics_path = fill_run_id(self.metrics_path, self.run_id)
        return self

    def task(self, name: str) -> TaskConfig:
        """The task called ``name``."""
        return next(t for t in self.tasks if t.name == name)


def fill_run_id(template: str, run_id: str) -> str:
    """``template`` with ``{run_id}`` replaced; any other brace is the user's text, kept as is
    (``str.format`` would take a password or path holding ``{`` for a field)."""
    return template.replace("{run_id}", run_id)


MAX_CONFIG_BYTES = 1 << 20
"""Largest config file read (1 MiB; the biggest shipped config is a few KB): a bigger one is
refused before it is read, so a mistaken path (a data file, a log) costs no memory or time."""


def _override_value(override: str, raw: str) -> Any:
    """An override's VALUE parsed as YAML.

    Raises:
        ConfigError: VALUE is not valid YAML (the message says to quote it).
    """
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"override {override!r}: the value is not valid YAML ({problem}); quote it to set a "
                          f"string, e.g. --set '{override.partition('=')[0]}=\"...\"'") from exc


def apply_override(data: dict[str, Any], override: str) -> None:
    """Applies one ``a.b.0.c=VALUE`` override in place (VALUE parsed as YAML).

    Raises:
        ConfigError: not KEY=VALUE, VALUE not YAML, or a path through something that is not a
            mapping or list.
    """
    key, sep, raw = override.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {override!r}: write KEY.PATH=VALUE, e.g. tasks.0.weight=2")
    value = _override_value(override, raw)
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"override {override!r}: {part!r} is not an index of a {len(node)}-item list")
            if last:
                node[int(part)] = value
            node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            node = node.setdefault(part, {})
        else:
            raise ConfigError(f"override {override!r}: {'.'.join(parts[:i])} is not a mapping or list")


def read_config_document(path: str | Path, overrides: list[str] | None, what: str) -> dict[str, Any]:
    """Reads a YAML config mapping, defaults ``run_id`` to the file's stem, applies overrides.

    Args:
        what: names the document in errors ("run config", "train config").

    Raises:
        ConfigError: unreadable file, bad YAML, a file over :data:`MAX_CONFIG_BYTES`, not a
            mapping, or a bad override.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:  # bounded: a 2 GB file is refused, not read
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{what} {path} is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a config "
                              "(give the YAML file of the run)")
        data = yaml.safe_load(raw.decode("utf-8")) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not text (byte {exc.start} is not UTF-8): give a YAML file") from exc
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path}: expected a mapping at the top level")
    data.setdefault("run_id", path.stem)
    for override in overrides or []:
        apply_override(data, override)
    return data


def load_run_config(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """Reads a run config from YAML, applies overrides, and validates it.

    The run id defaults to the file's stem.

    Raises:
        ConfigError: unreadable file, bad YAML, or a field that does not validate (the message
            lists each bad field).
    """
    data = read_config_document(path, overrides, "run config")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"run config {path}: {validation_problems(exc)}") from exc
