"""Install-and-test specs of (repo, version): the user's tables, then swebench's, then gymfleet's.

A spec says which Python a repository version needs, what to install before and how to
install it, and how to run its tests. swebench 4.1.0 carries one for every repository of
SWE-bench (``MAP_REPO_VERSION_TO_SPECS``); repositories it does not know (the fixtures, a
SWE-Gym or SWE-smith style dataset of other projects) use gymfleet's table of the same shape
(``fixtures/specs.yaml``), plus ``log_parser``. Tables passed as ``extra_tables``
(``--spec-table``) come first: an entry there overrides swebench's for the same repo and version,
field by field (so a user can move a repo version onto another Python, or pin a package that
drifted, without copying the rest; ``fixtures/drift.yaml`` is such a table).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from gymfleet.envs.swe import services, upstream
from gymfleet.envs.swe.errors import SpecNotFoundError

GYMFLEET_SPECS = Path(__file__).resolve().parent / "fixtures" / "specs.yaml"
DRIFT_SPECS = GYMFLEET_SPECS.with_name("drift.yaml")
"""Pins of packages that drifted since swebench's specs were written (loaded by default)."""


class RepoSpec(BaseModel):
    """One entry of a spec table (swebench's ``MAP_REPO_VERSION_TO_SPECS[repo][version]``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    repo: str
    """``owner/name``."""
    version: str
    """The key into the repo's table (``"3.0"``)."""
    source: str
    """Where the spec came from: ``"swebench"`` or a gymfleet table path."""
    python: str = "3.11"
    """Python version the repository needs (``"3.9"``)."""
    packages: str = ""
    """swebench: space-separated packages, or ``requirements.txt`` / ``environment.yml``."""
    pip_packages: list[str] = Field(default_factory=list)
    """Extra pip requirements, installed before the repository."""
    pre_install: list[str] = Field(default_factory=list)
    """Shell commands run in the repository before installing it."""
    install: str = ""
    """Shell command that installs the repository (``python -m pip install -e .``)."""
    test_cmd: str = "pytest -rA"
    """The test command; the test files of the test patch are appended."""
    eval_commands: list[str] = Field(default_factory=list)
    """Shell commands run before the tests (environment variables, locale)."""
    log_parser: str = ""
    """Name of a swebench log parser; empty means swebench's parser for the repo."""
    services: list[str] = Field(default_factory=list)
    """Network services the tests call by host name (``httpbin``: a local httpbin answering
    for httpbin.org), installed in the env image and started in the grading sandbox only
    (:mod:`gymfleet.envs.swe.services`)."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """The fields a spec table changed in swebench's entry (``{field: value}``; empty when the
    entry is swebench's own or a whole gymfleet entry)."""

    @field_validator("test_cmd", mode="before")
    @classmethod
    def _last_test_cmd(cls, value: Any) -> str:
        # swebench lists several commands for a few repos; the last one runs the tests
        return value[-1] if isinstance(value, list) else value

    @field_validator("python", "version", mode="before")
    @classmethod
    def _as_str(cls, value: Any) -> str:
        return str(value)

    def parser(self) -> Any:
        """The swebench log parser function for this repo.

        Raises:
            SpecNotFoundError: neither the spec nor swebench names a parser.
        """
        if self.log_parser:
            return upstream.log_parser(self.log_parser)
        found = upstream.parser_for_repo(self.repo)
        if found is None:
            raise SpecNotFoundError(
                f"no log parser for {self.repo}: add `log_parser: parse_log_pytest` (or another "
                "swebench parser name) to its spec table entry"
            )
        return found

    def build_fields(self) -> dict[str, Any]:
        """The fields an environment image depends on (not the test command or parser, and not
        ``python``: the image tag carries the Python actually used), so that a spec differing
        only in how tests run shares its image."""
        data = self.model_dump()
        for name in ("source", "overrides", "test_cmd", "eval_commands", "log_parser", "version", "python"):
            data.pop(name, None)
        return data

    def test_directives(self, row: dict[str, Any]) -> list[str]:
        """Test files (Django: modules) the test command runs, from the row's test patch."""
        return upstream.test_directives(row)

    def test_command(self, row: dict[str, Any]) -> str:
        """``test_cmd`` followed by the test patch's test files."""
        return " ".join([self.test_cmd, *self.test_directives(row)])


def load_spec(repo: str, version: str, extra_tables: Sequence[Path] = ()) -> RepoSpec:
    """The spec of ``repo`` at ``version``.

    Lookup order: ``extra_tables`` (in order), swebench's table, gymfleet's fixture table. The
    entries of every extra table that knows (repo, version) override swebench's entry field by
    field, an earlier table winning a field (a user's ``--spec-table`` that moves requests to
    another Python keeps ``drift.yaml``'s ``services``).

    Raises:
        SpecNotFoundError: no table knows (repo, version); the message lists the versions
            that are known for the repo. Also for an unreadable table file, and for a spec
            naming an unknown service.
    """
    known: list[str] = []
    table = upstream.repo_specs(repo)
    found: list[tuple[Path, dict[str, Any]]] = []
    for path in extra_tables:
        entries = _table_entries(path, repo)
        if version in entries:
            # a table written from a dumped RepoSpec carries its own source/overrides: ours win
            found.append((path, {k: v for k, v in entries[version].items()
                                 if k not in ("source", "overrides")}))
        known += list(entries)
    if found:
        base = dict(table[version]) if table is not None and version in table else {}
        entry: dict[str, Any] = {}
        for _, fields in reversed(found):
            entry |= fields
        changed = {k: v for k, v in entry.items() if base and base.get(k) != v}
        return _checked(RepoSpec(repo=repo, version=version,
                                 source=" + ".join(str(path) for path, _ in found),
                                 **{**base, **entry}, overrides=changed))
    if table is not None:
        if version in table:
            return RepoSpec(repo=repo, version=version, source="swebench", **table[version])
        known += list(table)
    entries = _table_entries(GYMFLEET_SPECS, repo)
    if version in entries:
        return _checked(RepoSpec(repo=repo, version=version, source=str(GYMFLEET_SPECS),
                                 **entries[version]))
    known += list(entries)
    hint = f"known versions: {', '.join(known)}" if known else "the repository is unknown"
    raise SpecNotFoundError(
        f"no install/test spec for {repo} {version} ({hint}); add one to a spec table "
        f"shaped like {GYMFLEET_SPECS.name} and pass it with --spec-table"
    )


def _checked(spec: RepoSpec) -> RepoSpec:
    services.resolve(spec.services)  # an unknown name fails here, before any build
    return spec


def _table_entries(path: Path, repo: str) -> dict[str, Any]:
    """The versions of ``repo`` in one YAML spec table (keys as strings)."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SpecNotFoundError(f"cannot read spec table {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise SpecNotFoundError(f"spec table {path} is not a mapping of repo -> version -> spec")
    return {str(k): v for k, v in (data.get(repo) or {}).items()}
