"""Finds or makes the image an instance's agent and grader run in.

Order, per instance: (1) an image already here (gymfleet's own for the repo+version, or the
official SWE-bench one); (2) the official prebuilt image, pulled when a registry answers;
(3) a build from the instance's spec (:mod:`gymfleet.envs.swe.specs`): ``images/swe`` (Python
3.11, git) + the repository at ``/testbed`` + the spec's pre-install, packages and install.
Built images are tagged ``gymfleet/swe.<owner>__<name>:<version>-<hash>`` and shared by every
instance of that repo and version; the hash covers the build inputs, so an unchanged spec
costs one API call. Concurrent requests for one image build it once.
"""

from __future__ import annotations

import hashlib
import io
import socket
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors
from pydantic import BaseModel

from gymfleet.envs.errors import ImageBuildError
from gymfleet.envs.images import ensure_image
from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.errors import ProvisionError, UnsupportedPythonError
from gymfleet.envs.swe.instances import SWEInstance
from gymfleet.envs.swe.repos import RepoSource
from gymfleet.envs.swe.specs import RepoSpec

REPO_DIR = "/testbed"
LABEL_SPEC = "gymfleet.swe.spec"
_LOG_TAIL_LINES = 40


class SWEImagesConfig(BaseModel):
    """How SWE images are found and built."""

    parent_image: str = "swe"
    """Name of the folder under ``images/`` that every built SWE image starts FROM."""
    image_python: str = "3.11"
    """The Python version of the parent image; a spec asking for another cannot be built."""
    try_official: bool = True
    """Use the official prebuilt SWE-bench image when it is here or a registry answers."""
    official_namespace: str = "swebench"
    """Docker Hub namespace of the official images."""
    registry_probe: str = "registry-1.docker.io:443"
    """host:port probed (TCP, 3 s) before trying to pull."""
    build_timeout_s: float = 1800.0
    """Docker client timeout for one build."""


@dataclass(frozen=True)
class ImageRef:
    """An image an instance can run in.

    Attributes:
        tag: the image reference.
        origin: ``local`` (already here), ``official`` (pulled) or ``built``.
        layout: ``gymfleet`` (venv on PATH, repo at /testbed, not yet at the base commit) or
            ``swebench`` (official: conda env ``testbed``, repo already at the base commit).
        seconds: time spent finding, pulling or building it.
    """

    tag: str
    origin: Literal["local", "official", "built"]
    layout: Literal["gymfleet", "swebench"]
    seconds: float


def official_image(instance_id: str, namespace: str = "swebench") -> str:
    """The official SWE-bench image name of an instance (``__`` is spelled ``_1776_``)."""
    return f"{namespace}/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest".lower()


class ImageProvider:
    """Finds, pulls or builds SWE images. Thread-safe; one build per image at a time."""

    def __init__(
        self,
        repos: RepoSource,
        config: SWEImagesConfig | None = None,
        client: docker.DockerClient | None = None,
    ) -> None:
        self.repos = repos
        self.config = config or SWEImagesConfig()
        self._client = client
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._registry_up: bool | None = None

    def client(self) -> docker.DockerClient:
        """The docker client (made on first use).

        Raises:
            ProvisionError: no Docker daemon answers.
        """
        if self._client is None:
            try:
                self._client = docker.from_env(timeout=int(self.config.build_timeout_s))
                self._client.ping()
            except docker.errors.DockerException as exc:
                raise ProvisionError(
                    f"Docker daemon not reachable: {exc}; start it (`make services`) or set "
                    "DOCKER_HOST"
                ) from exc
        return self._client

    def ensure(self, instance: SWEInstance, spec: RepoSpec) -> ImageRef:
        """An image for ``instance``, found, pulled or built (in that order).

        Raises:
            UnsupportedPythonError: the build would need a Python the parent image lacks.
            RepoNotFoundError: the repository is not in the mirror and cannot be cloned.
            ProvisionError: the build failed (the message ends with the build log's tail).
        """
        start = time.monotonic()
        official = official_image(instance.instance_id, self.config.official_namespace)
        if self.config.try_official and self._exists(official):
            return ImageRef(official, "local", "swebench", time.monotonic() - start)
        self._check_python(spec)
        parent = self._parent_tag()
        tag = self.tag_for(spec, parent)
        with self._lock(tag):
            if self._exists(tag):
                return ImageRef(tag, "local", "gymfleet", time.monotonic() - start)
            if self.config.try_official and self._pull(official):
                return ImageRef(official, "official", "swebench", time.monotonic() - start)
            self._build_env_image(instance, spec, parent, tag)
        return ImageRef(tag, "built", "gymfleet", time.monotonic() - start)

    def tag_for(self, spec: RepoSpec, parent: str) -> str:
        """The tag of the (repo, version) image built FROM ``parent``."""
        digest = hashlib.sha256(
            (self._parent_id(parent) + spec.model_dump_json()).encode()
        ).hexdigest()[:12]
        name = spec.repo.replace("/", "__").lower()
        version = "".join(c if c.isalnum() or c in "._-" else "-" for c in spec.version)
        return f"gymfleet/swe.{name}:{version}-{digest}"

    def _check_python(self, spec: RepoSpec) -> None:
        if spec.python != self.config.image_python:
            raise UnsupportedPythonError(
                f"{spec.repo} {spec.version} needs Python {spec.python} but SWE images are built "
                f"from images/{self.config.parent_image} (Python {self.config.image_python}) and "
                "another Python cannot be installed offline: pull the official SWE-bench image "
                "(needs a registry), or give the repo a spec with "
                f"python: '{self.config.image_python}' in a --spec-table file"
            )

    def _lock(self, tag: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(tag, threading.Lock())

    def _exists(self, tag: str) -> bool:
        try:
            self.client().images.get(tag)
            return True
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError as exc:
            raise ProvisionError(f"Docker failed to look up {tag}: {exc}") from exc

    def _parent_id(self, parent: str) -> str:
        return str(self.client().images.get(parent).id)

    def _registry_reachable(self) -> bool:
        if self._registry_up is None:
            host, _, port = self.config.registry_probe.rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=3):
                    self._registry_up = True
            except OSError:
                self._registry_up = False
        return self._registry_up

    def _pull(self, tag: str) -> bool:
        if not self._registry_reachable():
            return False
        try:
            self.client().images.pull(tag)
            return True
        except docker.errors.APIError:  # not published, or the registry refused
            return False

    def _parent_tag(self) -> str:
        """Builds ``images/<parent_image>`` (and its parents) when missing; returns its tag."""
        try:
            return ensure_image(self.config.parent_image)
        except ImageBuildError as exc:
            raise ProvisionError(f"cannot build images/{self.config.parent_image}: {exc}") from exc

    def _build_env_image(self, instance: SWEInstance, spec: RepoSpec, parent: str, tag: str) -> None:
        with tempfile.TemporaryDirectory(prefix="gymfleet-swe-") as tmp:
            repo_dir = Path(tmp) / "repo"
            self.repos.clone(instance.repo, repo_dir, instance.setup_commit)
            files: dict[str, bytes | Path] = {
                "Dockerfile": env_dockerfile(parent).encode(),
                "setup_env.sh": setup_env_script(spec, instance, repo_dir).encode(),
                "repo": repo_dir,
            }
            self._build(tag, files, {LABEL_SPEC: f"{spec.repo}@{spec.version}"})

    def _build(self, tag: str, files: dict[str, bytes | Path], labels: dict[str, str]) -> None:
        context = _tar_context(files)
        tail: list[str] = []
        try:
            for chunk in self.client().api.build(
                fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                decode=True, labels=labels,
            ):
                if "stream" in chunk:
                    tail = (tail + chunk["stream"].splitlines())[-_LOG_TAIL_LINES:]
                if "error" in chunk:
                    raise ProvisionError(
                        f"building {tag} failed: {chunk['error'].strip()}\n" + "\n".join(tail)
                    )
        except docker.errors.APIError as exc:
            raise ProvisionError(f"building {tag} failed: {exc}\n" + "\n".join(tail)) from exc


def env_dockerfile(parent: str) -> str:
    """The Dockerfile of a (repo, version) image."""
    return (
        f"FROM {parent}\n"
        f"COPY repo {REPO_DIR}\n"
        "COPY setup_env.sh /root/setup_env.sh\n"
        f"WORKDIR {REPO_DIR}\n"
        "RUN bash /root/setup_env.sh\n"
    )


def setup_env_script(spec: RepoSpec, instance: SWEInstance, repo_dir: Path) -> str:
    """The build script: swebench's environment steps for the spec, without conda.

    ``packages: requirements.txt`` installs the repo's requirements file (read from the
    mirror at the setup commit, where swebench downloads it from GitHub).

    Raises:
        UnsupportedPythonError: the spec needs a conda ``environment.yml``.
    """
    lines = ["#!/bin/bash", "set -euxo pipefail", f"cd {REPO_DIR}", *spec.pre_install]
    if spec.packages == "requirements.txt":
        paths = upstream.constants().MAP_REPO_TO_REQS_PATHS.get(spec.repo, ["requirements.txt"])
        found = [p for p in paths if (repo_dir / p).exists()]
        lines += [f"python -m pip install -r {p}" for p in found[:1]]
    elif spec.packages == "environment.yml":
        raise UnsupportedPythonError(
            f"{spec.repo} {spec.version} is specified by a conda environment.yml, which SWE "
            "images (pip, no conda) cannot install offline: use the official SWE-bench image"
        )
    elif spec.packages:
        lines.append(f"python -m pip install {spec.packages}")
    if spec.pip_packages:
        lines.append("python -m pip install " + " ".join(f"'{p}'" for p in spec.pip_packages))
    if spec.install:
        lines.append(spec.install)
    # what the install left untracked stays out of every diff an agent submits
    lines.append("git status --porcelain --untracked-files=all | sed -n 's/^?? //p' "
                 ">> .git/info/exclude")
    return "\n".join(lines) + "\n"


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
