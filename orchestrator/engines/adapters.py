"""Adapters as replicas see them: names that carry their policy version (``<run>-v000012``), so no
cache mixes policies, and the copy of an adapter's files onto a replica's own disk.

A published version is either a LoRA adapter (a PEFT folder) or, from a learner with
``learner.adapter: none``, full weights (a transformers folder: ``config.json``,
``model.safetensors``); :func:`is_full_weights` tells them apart, and an engine loads the
latter in place of its weights.
"""

from __future__ import annotations

import hashlib
import json
import re

import fsspec

from gymfleet.core.filecopy import DEFAULT_MAX_FILE_BYTES, copy_file, read_bounded

_VERSION = re.compile(r"-v(\d+)$")
ADAPTER_FILES = re.compile(r"^adapter_(config\.json|model\.(safetensors|bin))$")
"""The files a LoRA server reads (peft's names); optimiser state and metadata stay in the bucket."""
FULL_WEIGHT_FILES = re.compile(r"^(config\.json|generation_config\.json|model\.safetensors)$")
"""The files of a full-weight version an engine reads (transformers' names, one safetensors shard)."""
MANIFEST = "meta.json"
"""A bucket version's manifest (``trainer/bucket.py``): ``{"files": {name: {"size": ...}}}``."""


def adapter_name(run_id: str, version: int) -> str:
    """The adapter name of ``version`` of ``run_id``, e.g. ``adapter_name("r1", 12) == "r1-v000012"``."""
    if version < 1:
        raise ValueError(f"adapter versions start at 1 (0 is the base model), got {version}")
    return f"{run_id}-v{version:06d}"


def adapter_version(name: str | None) -> int:
    """The policy version in an adapter name; 0 for the base model (``None``) or an unversioned name."""
    if name is None:
        return 0
    match = _VERSION.search(name)
    return int(match.group(1)) if match else 0


def is_remote(path: str) -> bool:
    """Whether ``path`` is an fsspec URL of something other than the local filesystem."""
    protocol, sep, _ = path.partition("://")
    return bool(sep) and protocol not in {"file", "local"}


def is_full_weights(path: str) -> bool:
    """Whether the version folder at ``path`` (any fsspec URL) holds full weights
    (``model.safetensors``, no ``adapter_config.json``) rather than a LoRA adapter."""
    fs, root = fsspec.core.url_to_fs(path)
    root = root.rstrip("/")
    return fs.exists(f"{root}/model.safetensors") and not fs.exists(f"{root}/adapter_config.json")


def copy_adapter(source: str, dest_dir: str, name: str, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> str:
    """Copies an adapter's files from ``source`` to ``dest_dir/name``, across any fsspec filesystems.

    Used before ``load_lora_adapter`` on a replica that cannot read the bucket: ``source`` is the
    bucket's version folder (``s3://...``, ``memory://...``, a path), ``dest_dir`` a folder on the
    replica's disk as this process reaches it (a path, or ``sftp://host/path``). Only
    ``adapter_config.json`` and ``adapter_model.*`` are copied (of a full-weight version,
    ``config.json``, ``generation_config.json`` and ``model.safetensors``), and of a bucket version only those
    its manifest lists, at the manifest's size; a symlink or a file over ``max_file_bytes`` is
    refused (:mod:`gymfleet.core.filecopy`), and a file whose SHA-256 differs from the one its
    manifest gives is refused (the copy removed): a replica never loads a corrupt version. Files
    are written under a temporary name and renamed, so a replica never loads half an adapter.

    Returns:
        The copy's path on the destination filesystem (without protocol).

    Raises:
        FileNotFoundError: ``source`` holds no adapter files.
        ValueError: a file is a symlink, over the bound, or other than its manifest says (size
            or SHA-256).
        OSError: the destination cannot be written.
    """
    src_fs, src_root = fsspec.core.url_to_fs(source)
    dst_fs, dst_root = fsspec.core.url_to_fs(dest_dir)
    src_root = src_root.rstrip("/")
    sizes, digests = _adapter_files(src_fs, src_root)
    if "adapter_config.json" not in sizes and "model.safetensors" not in sizes:
        raise FileNotFoundError(f"no adapter_config.json (nor model.safetensors) under {source}: not a PEFT "
                                "adapter folder, nor full weights")
    final = f"{dst_root.rstrip('/')}/{name}"
    dst_fs.makedirs(final, exist_ok=True)
    for filename, size in sizes.items():
        copy_file(src_fs, f"{src_root}/{filename}", dst_fs, f"{final}/{filename}", expected_bytes=size,
                  max_bytes=max_file_bytes)
        if filename in digests and _sha256(dst_fs, f"{final}/{filename}") != digests[filename]:
            dst_fs.rm(final, recursive=True)
            raise ValueError(f"{source}/{filename} does not match the SHA-256 of its manifest: "
                             "a corrupt version, not loaded")
    return final


def _sha256(fs: fsspec.AbstractFileSystem, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _adapter_files(fs: fsspec.AbstractFileSystem, root: str) -> tuple[dict[str, int | None], dict[str, str]]:
    """The adapter files to copy from ``root`` with their manifest sizes (those a bucket
    version's manifest lists, or, a plain PEFT folder with no manifest, those it holds, size
    unknown), and the SHA-256 the manifest gives of each."""
    if fs.exists(f"{root}/{MANIFEST}"):
        meta = json.loads(read_bounded(fs, f"{root}/{MANIFEST}", 16 << 20))
        files = meta.get("files") if isinstance(meta, dict) else None
        if not isinstance(files, dict):
            raise ValueError(f"{root}/{MANIFEST} lists no files")
        try:
            sizes: dict[str, int | None] = {n: int(e["size"]) for n, e in files.items() if _served(n)}
            digests = {n: str(e["sha256"]) for n, e in files.items() if n in sizes and "sha256" in e}
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{root}/{MANIFEST}: a file entry without a size ({exc})") from exc
        return sizes, digests
    names = (p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False))
    return {n: None for n in names if _served(n)}, {}


def _served(name: str) -> bool:
    """Whether a replica reads the file ``name`` of a version (LoRA or full weights)."""
    return bool(ADAPTER_FILES.match(name) or FULL_WEIGHT_FILES.match(name))
