"""Finds or makes the image an instance's agent and grader run in.

Order, per instance: (1) the official SWE-bench image when it is here, or pulled when a registry
answers; (2) gymfleet's instance image, built when missing in three layers (see
:mod:`gymfleet.envs.swe.image_scripts`): the parent of the spec's Python
(:mod:`gymfleet.envs.swe.pythons`: ``images/swe*``, content-hash tags, built once), an env image
per (repo, version, Python) with the spec's environment installed by pip
(:mod:`gymfleet.envs.swe.environment`), and the instance image at the base commit.

What can refuse an instance (a Python no source carries, a conda-only spec) refuses before any
clone or build. Tags carry a hash of their inputs, so an unchanged instance costs a few API
calls; concurrent requests for one image build it once. A failed build raises
:class:`~gymfleet.envs.swe.errors.ImageBuildFailedError` naming the step and the package, with
the whole build log.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors

from gymfleet.core.strict import StrictModel
from gymfleet.envs.errors import ImageBuildError
from gymfleet.envs.images import ensure_image
from gymfleet.envs.swe import image_scripts as scripts
from gymfleet.envs.swe.environment import EnvPlan, ReadFile, plan_environment
from gymfleet.envs.swe.errors import ProvisionError
from gymfleet.envs.swe.image_build import build_layer
from gymfleet.envs.swe.instances import SWEInstance
from gymfleet.envs.swe.pythons import PYTHON_IMAGES, Fallback, PythonChoice, choose_python
from gymfleet.envs.swe.repos import RepoSource
from gymfleet.envs.swe.specs import RepoSpec

REPO_DIR = scripts.REPO_DIR
LABEL_SPEC = "gymfleet.swe.spec"
LABEL_INSTANCE = "gymfleet.swe.instance"
INSTANCE_IMAGE_REPO = "gymfleet/swe-instance"


class SWEImagesConfig(StrictModel):
    """How SWE images are found and built."""

    python_images: dict[str, str] = dict(PYTHON_IMAGES)
    """Python minor version -> folder under ``images/`` of the parent carrying it."""
    python_fallback: Fallback = "none"
    """``nearest``: run a spec whose Python is not reachable on the nearest newer one that is
    (recorded as ``python_fallback`` in report.json); ``none``: refuse it before any clone."""
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
        layout: ``gymfleet`` (venv on PATH, repo at /testbed at the instance's start commit)
            or ``swebench`` (official: conda env ``testbed``, repo at the base commit).
        seconds: time spent finding, pulling or building it.
        python_fallback: ``"3.8->3.9"`` when the spec's Python was replaced, else None.
        translated: what of a conda spec was translated to pip.
        build_log: the build logs of the layers this call built (empty when none was built).
    """

    tag: str
    origin: Literal["local", "official", "built"]
    layout: Literal["gymfleet", "swebench"]
    seconds: float
    python_fallback: str | None = None
    translated: tuple[str, ...] = ()
    build_log: str = ""


def official_image(instance_id: str, namespace: str = "swebench") -> str:
    """The official SWE-bench image name of an instance (``__`` is spelled ``_1776_``)."""
    return f"{namespace}/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest".lower()


class ImageProvider:
    """Finds, pulls or builds SWE images. Thread-safe; one build per image at a time."""

    def __init__(self, repos: RepoSource, config: SWEImagesConfig | None = None,
                 client: docker.DockerClient | None = None) -> None:
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

    def check(self, instance: SWEInstance, spec: RepoSpec) -> PythonChoice:
        """What can be decided without Docker or a clone: the Python, and that the conda part
        of the spec translates (where the mirror can be read in place).

        Raises:
            UnsupportedPythonError: the spec's Python is not reachable.
            CondaOnlySpecError: the spec needs conda-only packages.
        """
        choice = choose_python(spec.python, self.config.python_fallback,
                               self.config.python_images)
        plan_environment(spec, self._reader(instance))
        return choice

    def ensure(self, instance: SWEInstance, spec: RepoSpec) -> ImageRef:
        """An image for ``instance``: the official one when here or pullable, else gymfleet's
        instance image, built (with its env image) when missing.

        Raises:
            UnsupportedPythonError: the spec's Python is not reachable (before any clone).
            CondaOnlySpecError: the spec needs conda packages pip cannot replace.
            RepoNotFoundError: the repository is not in the mirror and cannot be cloned.
            ImageBuildFailedError: a build step failed (step, package, whole log).
            ProvisionError: Docker failed otherwise.
        """
        start = time.monotonic()
        official = official_image(instance.instance_id, self.config.official_namespace)
        if self.config.try_official and self._exists(official):
            return ImageRef(official, "local", "swebench", time.monotonic() - start)
        choice = self.check(instance, spec)
        plan = plan_environment(spec, self._reader(instance))
        parent = self._parent_tag(choice)
        env_tag = self.env_tag(spec, choice, parent, plan)
        tag = self.instance_tag(instance, spec, env_tag)
        logs: list[str] = []
        with self._lock(tag):
            if not self._exists(tag):
                if self.config.try_official and self._pull(official):
                    return ImageRef(official, "official", "swebench", time.monotonic() - start)
                self.repos.check_tree(instance.repo, instance.base_commit)
                with self._lock(env_tag):
                    if not self._exists(env_tag):
                        logs.append(self._build_env_image(instance, spec, parent, env_tag, plan))
                logs.append(build_layer(self.client(), tag, {
                    "Dockerfile": scripts.instance_dockerfile(env_tag).encode(),
                    "setup_instance.sh": scripts.setup_instance_script(
                        spec, instance.base_commit).encode(),
                }, {LABEL_INSTANCE: instance.instance_id, LABEL_SPEC: env_tag}))
        return ImageRef(tag, "built" if logs else "local", "gymfleet", time.monotonic() - start,
                        choice.fallback, tuple(plan.translated), "\n".join(logs))

    def env_tag(self, spec: RepoSpec, choice: PythonChoice, parent: str, plan: EnvPlan) -> str:
        """The tag of the (repo, version, Python) env image built FROM ``parent``."""
        digest = _digest(self._parent_id(parent), spec.build_fields(), choice.version,
                         scripts.setup_env_script(spec, plan), plan.requirements_file,
                         scripts.env_dockerfile(parent))
        name = spec.repo.replace("/", "__").lower()
        version = "".join(c if c.isalnum() or c in "._-" else "-" for c in spec.version)
        return f"gymfleet/swe.{name}:{version}-py{choice.version}-{digest}"

    def instance_tag(self, instance: SWEInstance, spec: RepoSpec, env_tag: str) -> str:
        """The tag of the instance image built FROM ``env_tag``."""
        digest = _digest(env_tag, scripts.setup_instance_script(spec, instance.base_commit))
        name = re.sub(r"[^a-z0-9_.-]", "-", instance.instance_id.lower())
        return f"{INSTANCE_IMAGE_REPO}.{name}:{digest}"

    def _reader(self, instance: SWEInstance) -> ReadFile | None:
        """Reads repository files at the setup commit from the mirror in place, or None when
        the source is a bundle or a URL (file-based specs are then planned after the clone)."""
        try:
            source = self.repos.locate(instance.repo)
        except ProvisionError:
            return None
        if source.endswith(".bundle") or "://" in source:
            return None
        return lambda path: self.repos.read_file(instance.repo, instance.setup_commit, path)

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

    def _parent_tag(self, choice: PythonChoice) -> str:
        """Builds the parent of ``choice`` (and its parents) when missing; returns its tag."""
        try:
            return ensure_image(choice.image)
        except ImageBuildError as exc:
            raise ProvisionError(f"cannot build images/{choice.image} (Python {choice.version}): "
                                 f"{exc}") from exc

    def _build_env_image(self, instance: SWEInstance, spec: RepoSpec, parent: str, tag: str,
                         plan: EnvPlan) -> str:
        with tempfile.TemporaryDirectory(prefix="gymfleet-swe-") as tmp:
            repo_dir = Path(tmp) / "repo"
            self.repos.clone(instance.repo, repo_dir, instance.setup_commit)
            self.repos.check_tree(instance.repo, instance.base_commit, str(repo_dir / ".git"))
            if self._reader(instance) is None:  # a bundle: the files can be read only now
                plan = plan_environment(spec, _local_reader(repo_dir))
            files: dict[str, bytes | Path] = {
                "Dockerfile": scripts.env_dockerfile(parent).encode(),
                "setup_env.sh": scripts.setup_env_script(spec, plan).encode(),
                "requirements.txt": plan.requirements_file.encode(),
                "repo": repo_dir,
            }
            return build_layer(self.client(), tag, files, {LABEL_SPEC: f"{spec.repo}@{spec.version}"})


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _local_reader(repo_dir: Path) -> Callable[[str], str | None]:
    def read(path: str) -> str | None:
        file = repo_dir / path
        return file.read_text(errors="replace") if file.is_file() else None

    return read
