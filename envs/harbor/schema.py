"""``task.toml`` as Harbor's schema defines it (versions 1.0 to 1.4), and what this family makes of it.

Every key Harbor knows is typed here and either mapped (limits, ``[environment.env]``,
``[solution.env]``) or explained (:func:`~.task._notes`: network policies, artifacts, prebuilt
image names); a key Harbor does not know is kept and listed by :func:`unknown_keys` (Harbor's own
models ignore it, so it is a warning here, never a refusal). The keys that change how a task is
graded and cannot be honoured here are named by :func:`grading_refusal`. Reference: Harbor's
``TaskConfig`` (``harbor/models/task/config.py``) and its task.toml docs (network policy,
separate verifier sandboxes).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Section(BaseModel):
    """A ``task.toml`` table: Harbor's keys typed; a key Harbor's schema lacks is kept in
    ``model_extra`` and warned about (Harbor's own models ignore it), never refused."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


NetworkMode = Literal["public", "no-network", "allowlist"]


class AgentSection(_Section):
    """``[agent]`` of ``task.toml``."""

    timeout_sec: float = Field(default=600.0, gt=0)
    """Seconds the agent's commands may run in all (model time not counted here)."""
    user: str | int | None = None
    """User the agent runs as (informative: commands run as the image's user)."""
    network_mode: NetworkMode | None = None
    """Harbor's network policy while the agent runs; here there is no network in any mode."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Hosts an ``allowlist`` policy lets through; here none is reachable."""


class EnvironmentSection(_Section):
    """``[environment]`` of ``task.toml``."""

    build_timeout_sec: float = Field(default=600.0, gt=0)
    """Seconds the image build may take."""
    docker_image: str | None = None
    """A prebuilt image Harbor would pull instead of building; unused here (nothing is pulled)."""
    image_name: str | None = None
    """The name Harbor's registry tooling gives the built image; unused (tags are content hashes)."""
    os: str = "linux"
    """The container's OS; only ``linux`` runs here."""
    cpus: float = Field(default=1.0, gt=0)
    """CPU limit of the sandbox, cores (finite: ``inf`` is refused in one line)."""
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
    """Harbor's older spelling of ``network_mode`` (``false`` = ``no-network``); here every
    sandbox runs without network (``info["network_note"]`` says so)."""
    network_mode: NetworkMode | None = None
    """Harbor's baseline network policy; the sandbox has no network in any mode."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Hosts an ``allowlist`` policy lets through; here none is reachable."""
    env: dict[str, str] = Field(default_factory=dict)
    """``[environment.env]``: variables of the container (agent, oracle and verifier see them);
    ``${VAR:-default}`` takes its default, a bare ``${VAR}`` (a host variable) is left out."""
    workdir: str | None = None
    """Working directory of the agent; default: the image's WORKDIR."""
    healthcheck: Any = None
    """Harbor's container health check, run before the agent starts; not run here."""
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

    @property
    def internet(self) -> bool:
        """What the task asked for: ``network_mode`` when given, else ``allow_internet``."""
        return self.network_mode != "no-network" if self.network_mode else self.allow_internet


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


class VerifierSection(_Section):
    """``[verifier]`` of ``task.toml``."""

    timeout_sec: float = Field(default=600.0, gt=0)
    """Seconds ``tests/test.sh`` may run."""
    user: str | int | None = None
    """User the verifier runs as (informative)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of the verifier (``[verifier.env]``)."""
    environment_mode: Literal["shared", "separate"] = "shared"
    """``shared``: the tests run in the agent's environment (what this family does);
    ``separate``: in a sandbox built from ``tests/`` holding only the declared artifacts, which
    grades differently and is refused."""
    environment: dict[str, Any] | None = None
    """``[verifier.environment]``: the separate verifier's sandbox (read only with ``separate``)."""
    collect: list[dict[str, Any]] = Field(default_factory=list)
    """``[[verifier.collect]]``: commands Harbor runs before copying artifacts out for people;
    they do not change the reward, and are not run here (no artifact is copied out)."""
    network_mode: NetworkMode | None = None
    """Harbor's network policy while the tests run; here there is none in any mode."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Hosts an ``allowlist`` policy lets through; here none is reachable."""


class SolutionSection(_Section):
    """``[solution]`` of ``task.toml``."""

    env: dict[str, str] = Field(default_factory=dict)
    """Variables of the oracle's ``solve.sh`` (set before it runs)."""


class HarborTaskToml(BaseModel):
    """``task.toml`` as Harbor's schema (1.0 to 1.4) defines it: every key Harbor knows is typed
    here; any other key anywhere is kept in ``model_extra`` (see :func:`unknown_keys`)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    version: str = "1.0"
    schema_version: str | None = None
    """Harbor's newer name for ``version``."""
    source: str | None = None
    """Where the task came from (informative)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    task: dict[str, Any] = Field(default_factory=dict)
    """``[task]``: name, description, authors, keywords (informative)."""
    agent: AgentSection = Field(default_factory=AgentSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    solution: SolutionSection = Field(default_factory=SolutionSection)
    artifacts: list[Any] = Field(default_factory=list)
    """Paths Harbor copies out of the sandbox after the agent, for people (and for a separate
    verifier); not copied here."""
    steps: list[Any] = Field(default_factory=list)
    """``[[steps]]``: a multi-step task, graded per step; refused."""
    multi_step_reward_mode: Any = None
    """Pre-1.3 multi-step setting; Harbor drops it."""


def unknown_keys(config: HarborTaskToml) -> list[str]:
    """The dotted names of the keys in ``config`` that Harbor's schema does not define."""
    found = [str(k) for k in (config.model_extra or {})]
    for name in ("agent", "environment", "verifier", "solution"):
        found += [f"{name}.{k}" for k in (getattr(config, name).model_extra or {})]
    return found


def grading_refusal(config: HarborTaskToml) -> str | None:
    """The keys that change how a task is graded and cannot be honoured here, as one line."""
    env, refused = config.environment, []
    if config.verifier.environment_mode == "separate":
        refused.append("verifier.environment_mode = 'separate' (tests in their own sandbox, given only the artifacts)")
    if config.steps:
        refused.append(f"[[steps]] ({len(config.steps)} steps, each graded on its own)")
    if env.os.lower() != "linux":
        refused.append(f"environment.os = {env.os!r} (only Linux containers run here)")
    if env.gpus:
        refused.append(f"environment.gpus = {env.gpus} (sandboxes here have no GPU)")
    if env.mcp_servers:
        refused.append("environment.mcp_servers (MCP servers are not started here)")
    return "not supported here: " + "; ".join(refused) if refused else None


_TEMPLATE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def sandbox_env(env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """``env`` as a sandbox gets it: ``${VAR:-default}`` becomes its default; a value naming a
    host variable without a default (Harbor passes the host's value: an API key) is left out,
    since nothing of the host's environment enters a sandbox. Returns (env, names left out)."""
    kept, dropped = {}, []
    for key, value in env.items():
        if any(m.group(2) is None for m in _TEMPLATE.finditer(value)):
            dropped.append(key)
        else:
            kept[key] = _TEMPLATE.sub(lambda m: m.group(2), value)
    return kept, dropped
