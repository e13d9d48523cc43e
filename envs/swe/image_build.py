"""Builds one SWE image layer through the docker SDK and explains a failed build: the step that
failed (the last ``>>>>> gymfleet step:`` marker), the package pip named, the whole log kept."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path
from typing import Any

import docker
import docker.errors

from gymfleet.envs.swe.errors import ImageBuildFailedError
from gymfleet.envs.swe.image_scripts import STEP_MARKER

_ERROR_TAIL_LINES = 15
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PIP_PACKAGE = (
    re.compile(r"No matching distribution found for ([^\s;]+)"),
    re.compile(r"Could not find a version that satisfies the requirement ([^\s;]+)"),
    re.compile(r"Failed building wheel for ([^\s;]+)"),
    re.compile(r"Failed to build ([^\s;]+)"),
    re.compile(r"Cannot install ([^\s;]+)"),
    re.compile(r"^Collecting ([^\s;]+)", re.M),
)


def build_layer(client: docker.DockerClient, tag: str, files: dict[str, bytes | Path],
                labels: dict[str, str]) -> str:
    """Builds ``tag`` from a context of ``files`` (name -> bytes, or a folder to add whole).

    Returns:
        The whole build log.

    Raises:
        ImageBuildFailedError: the build failed (step, package, whole log attached).
    """
    log: list[str] = []
    try:
        for chunk in client.api.build(fileobj=_tar_context(files), custom_context=True, tag=tag,
                                      rm=True, forcerm=True, decode=True, labels=labels,
                                      pull=False):
            if "stream" in chunk:
                log += _ANSI.sub("", chunk["stream"]).splitlines()
            if "error" in chunk:
                raise build_failure(tag, str(chunk["error"]), log)
    except docker.errors.APIError as exc:
        raise build_failure(tag, str(exc), log) from exc
    return "\n".join(log)


def build_failure(tag: str, error: str, log: list[str]) -> ImageBuildFailedError:
    """The error of a failed build: its step, the package pip named, the last lines in the
    message, and the whole log attached."""
    text = "\n".join(log)
    steps = [line.split(STEP_MARKER, 1)[1].strip() for line in log
             if STEP_MARKER in line and not line.lstrip().startswith("+")]
    step = steps[-1] if steps else "docker"
    package = ""
    for pattern in _PIP_PACKAGE:
        found = pattern.findall(text)
        if found:
            package = found[-1].strip("'\"")
            break
    where = f"step {step}" + (f", package {package}" if package else "")
    last_error = error.strip().splitlines()[-1] if error.strip() else "unknown error"
    tail = "\n".join(log[-_ERROR_TAIL_LINES:])
    return ImageBuildFailedError(
        f"building {tag} failed at {where}: {last_error}\n"
        f"--- last lines (the whole log is build_image.log beside the report) ---\n{tail}",
        step=step, package=package, build_log=f"{text}\nERROR: {error}\n")


def _tar_context(files: dict[str, bytes | Path]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            if isinstance(data, Path):
                tar.add(str(data), arcname=name)
            else:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def image_info(client: Any, tag: str) -> dict[str, Any]:
    """Size (MB) and id of an image, for reports and benchmarks."""
    image = client.images.get(tag)
    return {"tag": tag, "id": image.id, "size_mb": round(image.attrs.get("Size", 0) / 1e6, 1)}
