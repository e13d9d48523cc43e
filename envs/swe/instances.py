"""SWE-bench task instances: the 12-field record, and loading it from files or the hub.

Any dataset with SWE-bench's schema is a source (SWE-bench Lite/Verified, SWE-Gym, SWE-smith
style sets, the fixtures shipped in ``fixtures/``). Rows come from a JSON array, JSON Lines, a
parquet file, a CSV file with a header row (the list columns JSON-encoded, as published), or a
dataset name loaded through ``datasets`` (needs a reachable hub).
"""

from __future__ import annotations

import csv
import difflib
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from gymfleet.envs.swe.errors import InstanceLoadError

FIXTURES_DIR = Path(__file__).resolve().parent / "fixtures"
FIXTURE_INSTANCES = FIXTURES_DIR / "instances.jsonl"
FIXTURE_MIRROR = FIXTURES_DIR / "repos"
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,199}")
"""What an instance id (and an evaluation run id) may be: one path component, never ``..``."""
FIXTURES_NAME = "fixtures"
"""The dataset name that means the fixtures shipped with gymfleet."""


class SWEInstance(BaseModel):
    """One task instance (SWE-bench's 12 columns; extra columns are kept).

    ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` are JSON-encoded strings in the published data; they
    are decoded to lists here (a list is accepted as is).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    instance_id: str
    """``owner__repo-PR``."""
    repo: str
    """``owner/name``."""
    base_commit: str
    """Commit the task starts from."""
    patch: str
    """The gold fix (non-test files), a unified diff."""
    test_patch: str
    """Tests added or changed by the fix, a unified diff."""
    problem_statement: str
    """The issue text the agent gets."""
    hints_text: str = ""
    """Issue comments written before the fix."""
    created_at: str = ""
    """ISO time the fix was proposed."""
    version: str
    """Key into the repo's spec table (``"3.0"``)."""
    FAIL_TO_PASS: list[str]
    """Tests that fail before the fix and pass after it."""
    PASS_TO_PASS: list[str]
    """Tests that pass before and after."""
    environment_setup_commit: str = ""
    """Commit whose dependencies define the environment image (defaults to base_commit)."""

    @field_validator("instance_id")
    @classmethod
    def _confined_id(cls, value: str) -> str:
        # the id names folders under --output-dir (patch.diff, logs): one safe path component
        if not SAFE_ID.fullmatch(value) or value in {".", ".."}:
            raise ValueError(f"instance_id {value[:80]!r} is not a safe file name "
                             "(letters, digits, '_', '-', '.'; no '/', no leading '.')")
        return value

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _decode_test_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else []
        return value

    @field_validator("hints_text", "created_at", "environment_setup_commit", mode="before")
    @classmethod
    def _none_as_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("version", mode="before")
    @classmethod
    def _version_str(cls, value: Any) -> str:
        return str(value)

    @property
    def setup_commit(self) -> str:
        """``environment_setup_commit``, or ``base_commit`` when the row has none."""
        return self.environment_setup_commit or self.base_commit

    def row(self) -> dict[str, Any]:
        """The instance as a swebench row (lists JSON-encoded, as in the published data)."""
        data = self.model_dump()
        data["FAIL_TO_PASS"] = json.dumps(self.FAIL_TO_PASS)
        data["PASS_TO_PASS"] = json.dumps(self.PASS_TO_PASS)
        return data


def load_instances(
    source: str | Path = FIXTURES_NAME, instance_ids: Sequence[str] = (), split: str = "test"
) -> list[SWEInstance]:
    """Loads instances from a file or a dataset name.

    Args:
        source: ``"fixtures"``; a ``.json`` (array) / ``.jsonl`` / ``.parquet`` file; or a
            dataset name for ``datasets.load_dataset`` (e.g. ``princeton-nlp/SWE-bench_Lite``).
        instance_ids: keep only these (in the dataset's order); unknown ids are an error.
        split: dataset split, for names.

    Raises:
        InstanceLoadError: unreadable file, a row missing a field, unknown ids, or a dataset
            name that cannot be loaded (no hub reachable).
    """
    rows = _read_rows(source, split)
    instances = []
    for n, row in enumerate(rows):
        try:
            instances.append(SWEInstance.model_validate(row))
        except (ValidationError, json.JSONDecodeError) as exc:
            first = str(exc).splitlines()
            why = "; ".join(first[1:3]) if len(first) > 2 else first[0]
            raise InstanceLoadError(f"{source}: row {n} is not a SWE-bench instance ({why})") from exc
    return select(instances, instance_ids, str(source))


def select(instances: list[SWEInstance], ids: Sequence[str], source: str = "") -> list[SWEInstance]:
    """The instances named by ``ids`` (all when empty).

    Raises:
        InstanceLoadError: an id is not in ``instances``.
    """
    if not ids:
        return instances
    known = {i.instance_id for i in instances}
    missing = [i for i in ids if i not in known]
    if missing:
        close = sorted({m for i in missing for m in difflib.get_close_matches(i, known, n=5)})
        hint = f"close matches: {', '.join(close)}" if close else f"{len(known)} instances known"
        raise InstanceLoadError(f"{source}: unknown instance ids {missing}; {hint}")
    wanted = set(ids)
    return [i for i in instances if i.instance_id in wanted]


def _read_rows(source: str | Path, split: str) -> Iterable[dict[str, Any]]:
    if str(source) == FIXTURES_NAME:
        source = FIXTURE_INSTANCES
    path = Path(source)
    if path.suffix in {".json", ".jsonl", ".parquet", ".csv"} or path.exists():
        if not path.is_file():
            raise InstanceLoadError(f"dataset file {path} does not exist")
        return _read_file(path)
    return _load_hub_dataset(str(source), split)


def _read_file(path: Path) -> list[dict[str, Any]]:
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        if path.suffix == ".csv":
            with path.open(newline="") as f:
                return list(csv.DictReader(f))
        text = path.read_text()
        if path.suffix == ".json" or text.lstrip().startswith("["):
            data = json.loads(text)
            return data if isinstance(data, list) else [data]
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, ValueError, csv.Error) as exc:
        raise InstanceLoadError(f"cannot read {path}: {str(exc).splitlines()[0][:200]}") from exc


def _load_hub_dataset(name: str, split: str) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError as exc:
        raise InstanceLoadError(f"loading {name!r} by name needs `pip install datasets`") from exc
    try:
        return [dict(r) for r in datasets.load_dataset(name, split=split)]
    except Exception as exc:  # datasets raises many kinds (connection, not found, auth)
        raise InstanceLoadError(
            f"cannot load dataset {name!r} (split {split!r}) through `datasets`: {exc}. "
            "Without a reachable hub, pass a local .json/.jsonl/.parquet file instead"
        ) from exc
