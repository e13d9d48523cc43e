"""Adapters as replicas see them: names that carry their policy version (``<run>-v000012``), so no
cache mixes policies, and the copy of an adapter's files onto a replica's own disk."""

from __future__ import annotations

import re

import fsspec

_VERSION = re.compile(r"-v(\d+)$")
ADAPTER_FILES = re.compile(r"^adapter_(config\.json|model\.(safetensors|bin))$")
"""The files a LoRA server reads (peft's names); optimiser state and metadata stay in the bucket."""


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


def copy_adapter(source: str, dest_dir: str, name: str) -> str:
    """Copies an adapter's files from ``source`` to ``dest_dir/name``, across any fsspec filesystems.

    Used before ``load_lora_adapter`` on a replica that cannot read the bucket: ``source`` is the
    bucket's version folder (``s3://...``, ``memory://...``, a path), ``dest_dir`` a folder on the
    replica's disk as this process reaches it (a path, or ``sftp://host/path``). Only
    ``adapter_config.json`` and ``adapter_model.*`` are copied. Files are written under a
    temporary name and renamed, so a replica never loads half an adapter.

    Returns:
        The copy's path on the destination filesystem (without protocol).

    Raises:
        FileNotFoundError: ``source`` holds no adapter files.
        OSError: the destination cannot be written.
    """
    src_fs, src_root = fsspec.core.url_to_fs(source)
    dst_fs, dst_root = fsspec.core.url_to_fs(dest_dir)
    files = [p for p in src_fs.ls(src_root, detail=False) if ADAPTER_FILES.match(p.rstrip("/").rsplit("/", 1)[-1])]
    if not any(p.endswith("adapter_config.json") for p in files):
        raise FileNotFoundError(f"no adapter_config.json under {source}: not a PEFT adapter folder")
    final = f"{dst_root.rstrip('/')}/{name}"
    dst_fs.makedirs(final, exist_ok=True)
    for path in files:
        filename = path.rstrip("/").rsplit("/", 1)[-1]
        tmp = f"{final}/.{filename}.partial"
        dst_fs.pipe_file(tmp, src_fs.cat_file(path))
        dst_fs.mv(tmp, f"{final}/{filename}")
    return final
