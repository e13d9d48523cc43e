"""The adapter bucket: versioned LoRA adapters (and the learner's state) on any fsspec URL.

Layout (docs/design.md, AdapterBucket)::

    <bucket>/<run_id>/adapters/v000012/   PEFT files + learner_state.pt + meta.json + COMMITTED
    <bucket>/<run_id>/adapters/LATEST     "12"

A version is written under a temporary name, renamed into place, and only counts once its
``COMMITTED`` marker exists (object stores have no atomic directory rename, so the marker,
written last, is the commit). ``LATEST`` is rewritten after the commit; readers that find it
missing or pointing at an uncommitted version fall back to the newest committed one.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import fsspec

from gymfleet.trainer.errors import BucketError

COMMITTED = "COMMITTED"
LATEST = "LATEST"
META = "meta.json"
_VERSION_RE = re.compile(r"^v(\d{6})$")


def version_name(version: int) -> str:
    """``v000012`` for 12."""
    return f"v{version:06d}"


@dataclass(frozen=True)
class PublishedAdapter:
    """A committed adapter version.

    Attributes:
        version: policy version (1, 2, ...).
        url: where its files are (an fsspec URL or local path).
        meta: what the learner wrote beside it (step, resolved config, time).
    """

    version: int
    url: str
    meta: dict[str, Any]


@runtime_checkable
class Bucket(Protocol):
    """Where adapters are published and from where replicas and a restarted learner read them."""

    def publish(self, version: int, local_dir: Path, meta: dict[str, Any]) -> PublishedAdapter:
        """Called by the learner every ``publish_every`` steps; atomic."""
        ...

    def latest(self) -> PublishedAdapter | None:
        """Called by the gateway to hot-load, and by a learner at start to resume."""
        ...

    def fetch(self, version: int, local_dir: Path) -> Path:
        """Called by an engine that cannot read the bucket URL directly: copies a version locally."""
        ...


class AdapterBucket:
    """An fsspec-backed :class:`Bucket` (a local directory by default).

    Args:
        url: any fsspec URL (``/path``, ``file://``, ``memory://``, ``s3://``...).
        run_id: the training run; versions live under ``<url>/<run_id>/adapters/``.
    """

    def __init__(self, url: str, run_id: str) -> None:
        self.fs, root = fsspec.core.url_to_fs(url)
        self.root = f"{root.rstrip('/')}/{run_id}/adapters"
        self.run_id = run_id
        self.fs.makedirs(self.root, exist_ok=True)

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def publish(self, version: int, local_dir: Path, meta: dict[str, Any]) -> PublishedAdapter:
        """Uploads every file of ``local_dir`` as ``version`` and moves LATEST to it.

        Raises:
            BucketError: the version already exists (versions are immutable), or ``local_dir``
                holds no files.
        """
        final = self._path(version_name(version))
        if self.fs.exists(f"{final}/{COMMITTED}"):
            raise BucketError(f"{final} is already committed; versions are immutable, publish {version + 1}")
        files = sorted(p for p in Path(local_dir).rglob("*") if p.is_file())
        if not files:
            raise BucketError(f"nothing to publish: {local_dir} holds no files")
        tmp = self._path(f".tmp-{version_name(version)}-{uuid.uuid4().hex[:8]}")
        for path in files:
            remote = f"{tmp}/{path.relative_to(local_dir).as_posix()}"
            self.fs.makedirs(remote.rsplit("/", 1)[0], exist_ok=True)
            self.fs.put_file(str(path), remote)
        meta = {**meta, "version": version, "published_at": time.time()}
        with self.fs.open(f"{tmp}/{META}", "w") as f:
            json.dump(meta, f, indent=2, default=str)
        if self.fs.exists(final):  # a half-written earlier attempt: never committed, safe to drop
            self.fs.rm(final, recursive=True)
        self.fs.mv(tmp, final, recursive=True)
        self.fs.pipe_file(f"{final}/{COMMITTED}", b"")
        self._write_latest(version)
        return PublishedAdapter(version, self._url(final), meta)

    def _write_latest(self, version: int) -> None:
        tmp = self._path(f".{LATEST}-{uuid.uuid4().hex[:8]}")
        self.fs.pipe_file(tmp, str(version).encode())
        self.fs.mv(tmp, self._path(LATEST))

    def _url(self, path: str) -> str:
        protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        return path if protocol in {"file", "local"} else f"{protocol}://{path}"

    def versions(self) -> list[int]:
        """Every committed version, ascending."""
        found = []
        for entry in self.fs.ls(self.root, detail=False):
            match = _VERSION_RE.match(entry.rstrip("/").rsplit("/", 1)[-1])
            if match and self.fs.exists(f"{entry}/{COMMITTED}"):
                found.append(int(match.group(1)))
        return sorted(found)

    def get(self, version: int) -> PublishedAdapter:
        """The committed ``version``.

        Raises:
            BucketError: missing or not committed.
        """
        path = self._path(version_name(version))
        if not self.fs.exists(f"{path}/{COMMITTED}"):
            raise BucketError(f"adapter {version_name(version)} of run {self.run_id} is not committed in {self.root}")
        with self.fs.open(f"{path}/{META}", "r") as f:
            meta = json.load(f)
        return PublishedAdapter(version, self._url(path), meta)

    def latest(self) -> PublishedAdapter | None:
        """The version LATEST names, else the newest committed one; None when nothing is published."""
        try:
            return self.get(int(self.fs.cat_file(self._path(LATEST)).decode().strip()))
        except (FileNotFoundError, ValueError, BucketError):
            versions = self.versions()
            return self.get(versions[-1]) if versions else None

    def fetch(self, version: int, local_dir: Path) -> Path:
        """Copies the committed ``version`` into ``local_dir/v000012`` and returns that folder."""
        adapter = self.get(version)
        dest = Path(local_dir) / version_name(version)
        src = self._path(version_name(version))
        for remote in self.fs.find(src):
            target = dest / remote[len(src) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(remote, str(target))
        del adapter  # get() above checked the version is committed
        return dest
