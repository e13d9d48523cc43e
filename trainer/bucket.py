"""The adapter bucket: versioned LoRA adapters (and the learner's state) on any fsspec URL.

Layout (docs/design.md, AdapterBucket)::

    <bucket>/<run_id>/adapters/v000012/   PEFT files + learner_state.safetensors + meta.json + COMMITTED
    <bucket>/<run_id>/adapters/LATEST     "12"

A version is written under a temporary name, renamed into place, and only counts once its
``COMMITTED`` marker exists (object stores have no atomic directory rename, so the marker,
written last, is the commit). ``meta.json`` lists every file with its size and SHA-256.

The newest committed version that reads back is the latest: ``LATEST`` (rewritten after each
commit) is a hint for people and tools, and a stale one (a crash between the commit and its
update) loses to a newer committed version. A committed version whose files do not read back
(bad ``meta.json``, a file of the wrong size, or of the wrong bytes once fetched) is skipped with
a warning for the previous one; nothing is ever deleted.

A version is untrusted when read back (anyone who can write the bucket can plant files): reads
and copies take only the files its manifest lists, under names that stay in the version's folder,
never through a symlink, and each at most ``max_file_bytes`` (:mod:`gymfleet.core.filecopy`).
A learner that resumed from an older version because newer ones are corrupt publishes past them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import fsspec

from gymfleet.core.filecopy import (
    DEFAULT_MAX_FILE_BYTES,
    checked_name,
    copy_file,
    read_bounded,
    regular_file_size,
)
from gymfleet.trainer.errors import BucketCorruptError, BucketError

log = logging.getLogger(__name__)

COMMITTED = "COMMITTED"
LATEST = "LATEST"
META = "meta.json"
MAX_META_BYTES = 16 << 20
"""Bound on a version's meta.json (it lists files and group ids, never weights)."""
LEARNER_FILES = ("learner_state.",)
"""Name prefixes of a version's files only a resuming learner reads (``learner_state.safetensors``)."""
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

    def committed_newest_first(self) -> Iterator[PublishedAdapter]:
        """Called by a learner at start and by the replicas' follower: every committed version
        that reads back, newest first, so that each skips a corrupt one to the last good one."""
        ...

    def fetch(self, version: int, local_dir: Path, only_served: bool = False) -> Path:
        """Called by an engine that cannot read the bucket URL directly (``only_served``: without
        the learner's state), and by a learner that resumes: copies a version locally."""
        ...


class AdapterBucket:
    """An fsspec-backed :class:`Bucket` (a local directory by default).

    Args:
        url: any fsspec URL (``/path``, ``file://``, ``memory://``, ``s3://``...).
        run_id: the training run; versions live under ``<url>/<run_id>/adapters/``.
        max_file_bytes: the largest file a read of a version accepts (a larger one, or one its
            manifest says is larger, makes the version corrupt).
    """

    def __init__(self, url: str, run_id: str, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        self.max_file_bytes = max_file_bytes
        self.fs, root = fsspec.core.url_to_fs(url)
        self.root = f"{root.rstrip('/')}/{run_id}/adapters"
        self.run_id = run_id
        # Made by the first publish: a reader (export, progress, a mistyped run id) leaves nothing behind.

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
        manifest = {path.relative_to(local_dir).as_posix(): {"size": path.stat().st_size, "sha256": _sha256(path)}
                    for path in files if path.relative_to(local_dir).as_posix() != META}
        meta = {**meta, "version": version, "published_at": time.time(), "files": manifest}
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

    def _names_newest_first(self) -> list[tuple[int, str]]:
        found = []
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:  # nothing published yet
            return []
        for entry in entries:
            match = _VERSION_RE.match(entry.rstrip("/").rsplit("/", 1)[-1])
            if match:
                found.append((int(match.group(1)), entry.rstrip("/")))
        return sorted(found, reverse=True)

    def versions(self) -> list[int]:
        """Every committed version, ascending."""
        return sorted(v for v, entry in self._names_newest_first() if self.fs.exists(f"{entry}/{COMMITTED}"))

    def get(self, version: int) -> PublishedAdapter:
        """The committed ``version``, its files checked against its manifest (sizes).

        Raises:
            BucketError: missing or not committed.
            BucketCorruptError: committed, but its meta.json or a file does not read back.
        """
        path = self._path(version_name(version))
        if not self.fs.exists(f"{path}/{COMMITTED}"):
            raise BucketError(f"adapter {version_name(version)} of run {self.run_id} is not committed in {self.root}")
        try:
            meta = json.loads(read_bounded(self.fs, f"{path}/{META}", MAX_META_BYTES))
            if not isinstance(meta, dict) or not isinstance(meta.get("files") or {}, dict):
                raise ValueError("not a JSON object with a files object")
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise BucketCorruptError(f"{path}/{META} does not read back: {exc}") from exc
        for name, entry in dict(meta.get("files") or {}).items():
            try:
                size = regular_file_size(self.fs, f"{path}/{checked_name(name)}")
                listed = int(entry["size"])
            except (OSError, KeyError, TypeError) as exc:
                raise BucketCorruptError(f"{path}/{name} is listed in its manifest but missing: {exc}") from exc
            except ValueError as exc:  # a symlink, a folder, a name leaving the version
                raise BucketCorruptError(f"{path}/{name}: {exc}") from exc
            if size != listed:
                raise BucketCorruptError(f"{path}/{name} has {size} bytes, its manifest says {listed} (truncated?)")
            if size > self.max_file_bytes:
                raise BucketCorruptError(f"{path}/{name} has {size} bytes, over the bound of {self.max_file_bytes}")
        return PublishedAdapter(version, self._url(path), meta)

    def committed_newest_first(self) -> Iterator[PublishedAdapter]:
        """Every committed version that reads back, newest first; each one skipped is logged
        (WARNING) and left in place."""
        for version, entry in self._names_newest_first():
            if not self.fs.exists(f"{entry}/{COMMITTED}"):
                continue
            try:
                yield self.get(version)
            except BucketCorruptError as exc:
                log.warning("skipping adapter %s of run %s: %s (left in place)", version_name(version), self.run_id, exc)

    def latest(self) -> PublishedAdapter | None:
        """The newest committed version that reads back (whatever ``LATEST`` says); None when
        nothing usable is published."""
        adapter = next(self.committed_newest_first(), None)
        if adapter is not None and self._hint() not in (adapter.version, None):
            log.warning("LATEST of run %s names v%s, but v%s is the newest committed version: using it",
                        self.run_id, self._hint(), adapter.version)
        return adapter

    def _hint(self) -> int | None:
        try:
            return int(self.fs.cat_file(self._path(LATEST)).decode().strip())
        except (FileNotFoundError, ValueError):
            return None

    def fetch(self, version: int, local_dir: Path, only_served: bool = False) -> Path:
        """Copies the committed ``version``'s manifest files (and meta.json) into
        ``local_dir/v000012``, checks each against its manifest (size and SHA-256), and returns
        that folder. Files the manifest does not list are not read. With ``only_served``, the
        learner's state (:data:`LEARNER_FILES`: optimiser moments, twice the weights' size under
        full fine-tuning) is left out: what a replica reads.

        Raises:
            BucketError: the version is missing or not committed.
            BucketCorruptError: a file is a symlink, over the bound, or does not match its
                manifest (the bucket's copy is kept).
        """
        adapter = self.get(version)
        dest = Path(local_dir) / version_name(version)
        src = self._path(version_name(version))
        local = fsspec.filesystem("file")
        listed = {name: int(entry["size"]) for name, entry in dict(adapter.meta.get("files") or {}).items()
                  if not (only_served and name.startswith(LEARNER_FILES))}
        for name, size in [(META, None), *listed.items()]:
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                copy_file(self.fs, f"{src}/{name}", local, str(target), expected_bytes=size,
                          max_bytes=MAX_META_BYTES if size is None else self.max_file_bytes)
            except ValueError as exc:
                raise BucketCorruptError(f"{src}/{name}: {exc}") from exc
        for name, entry in dict(adapter.meta.get("files") or {}).items():
            if name in listed and _sha256(dest / name) != entry["sha256"]:
                raise BucketCorruptError(f"{src}/{name} does not match the SHA-256 of its manifest")
        return dest

    def newest_version(self) -> int:
        """The highest committed version number, whether it reads back or not (0 when none):
        the next publish must be past it, since versions are immutable."""
        return max(self.versions(), default=0)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
