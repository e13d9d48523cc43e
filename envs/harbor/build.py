"""Harbor task images: a task's Dockerfile translated (:mod:`.dockerfile`), built through the docker
SDK over its build context, tagged by content hash.

The tag is ``gymfleet-harbor/<task>:<hash>``, the hash covering the translated Dockerfile (which
names the exact base tags), every file of the build context and the staged uv version; the hash
is also the label ``gymfleet.image.hash``. A cached rebuild is therefore one hash of the context
and one ``images.get``. Builds of one tag are serialised across processes by a file lock.
"""

from __future__ import annotations

import collections
import hashlib
import io
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
from filelock import FileLock

from gymfleet.envs.errors import ImageBuildError
from gymfleet.envs.harbor.dockerfile import (
    SUITES, Translation, UnbuildableError, entrypoint_lines, translate, user_folder_lines,
)
from gymfleet.envs.harbor.staging import (
    STAGING_FAILED, VerifierStaging, staging_lines, verifier_staging,
)
from gymfleet.envs.harbor.task import HarborTask
from gymfleet.envs.images import HOST_CA_BUNDLE, LABEL_IMAGE_HASH, ImageBuilder

IMAGE_REPO = "gymfleet-harbor"
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "gymfleet" / "harbor"
UV_ENV_SCRIPT = b'#!/bin/sh\ncase ":${PATH}:" in *:"$HOME/.local/bin":*) ;; *) export PATH="$HOME/.local/bin:$PATH" ;; esac\n'
"""What uv's installer leaves as ``~/.local/bin/env`` (verifiers ``source`` it)."""
LOG_TAIL_LINES = 20

Log = Callable[[str], None]


@dataclass(frozen=True)
class TaskImage:
    """A task's built image.

    Attributes:
        tag: ``gymfleet-harbor/<task>:<hash12>``.
        built: True when this call built it, False when it was cached.
        duration_s: seconds this call took.
        base_substitution: per substituted FROM, ``"<original> -> <gymfleet base> (...)"``.
        workdir: the image's working directory (``/`` when it sets none).
        staging: what the verifier fetches, staged at build time.
        entrypoint: the task's own ``ENTRYPOINT`` (reset in the image; the env starts it), or None.
    """

    tag: str
    built: bool
    duration_s: float
    base_substitution: list[str] = field(default_factory=list)
    workdir: str = "/"
    staging: VerifierStaging = field(default_factory=VerifierStaging)
    entrypoint: list[str] | None = None


@dataclass
class _Plan:
    task: HarborTask
    translation: Translation
    staging: VerifierStaging
    dockerfile: str
    digest: str


class HarborImageBuilder:
    """Builds task images; one per process is enough (it keeps no per-task state).

    Args:
        client: a docker SDK client; from the environment when None.
        cache_dir: where uv wheels are kept between builds.
        log: receives build log lines.
    """

    def __init__(self, client: docker.DockerClient | None = None, cache_dir: Path | None = None,
                 log: Log | None = None) -> None:
        self._client = client
        self.cache_dir = Path(cache_dir or DEFAULT_CACHE_DIR)
        self._log = log or (lambda line: None)
        self._bases = ImageBuilder(client=client, log=self._log)

    @property
    def client(self) -> docker.DockerClient:
        """The SDK client, shared with the base image builder."""
        return self._bases.client

    def plan(self, task: HarborTask, base_tags: dict[str, str] | None = None) -> _Plan:
        """The translated Dockerfile and content hash of ``task`` (nothing is built).

        Raises:
            UnbuildableError: the task is refused, has no Dockerfile, or a FROM has no substitute.
        """
        if task.refusal:
            raise UnbuildableError(task.refusal)
        if not task.dockerfile.is_file():
            raise UnbuildableError(f"no Dockerfile in {task.context_dir}")
        translation = translate(task.dockerfile.read_text(errors="replace"), base_tags or {})
        script = task.test_script.read_text(errors="replace") if task.test_script.is_file() else ""
        staging = verifier_staging(script)
        extra = [*staging_lines(staging, translation.final_user), *user_folder_lines(translation.final_user),
                 *entrypoint_lines(translation)]
        dockerfile = translation.dockerfile + "\n".join(extra) + "\n"  # as before: cached tags stay valid
        digest = hashlib.sha256(dockerfile.encode())
        digest.update(f"uv {staging.uv_version}\n".encode())
        for path in _context_files(task.context_dir):
            rel = path.relative_to(task.context_dir).as_posix()
            digest.update(f"file {rel} {path.stat().st_mode & 0o111:o}\n".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        return _Plan(task, translation, staging, dockerfile, digest.hexdigest())

    def tag(self, plan: _Plan) -> str:
        """``gymfleet-harbor/<task>:<first 12 hex digits of the hash>`` (name made tag-safe)."""
        name = "".join(c if c.isalnum() or c in "._-" else "-" for c in plan.task.name.lower()).strip("._-")
        return f"{IMAGE_REPO}/{name or 'task'}:{plan.digest[:12]}"

    def ensure(self, task: HarborTask, force: bool = False) -> TaskImage:
        """Builds ``task``'s image unless its tag exists; blocking (use a thread from async code).

        Raises:
            UnbuildableError: the task cannot be built here (refused, no substitute FROM, the
                build failed); ``str()`` is one line.
            ImageBuildError: the daemon is unreachable.
        """
        started = time.monotonic()
        bases = self._base_tags(task)
        plan = self.plan(task, bases)
        tag = self.tag(plan)
        lock = FileLock(str(Path(tempfile.gettempdir()) / f"gymfleet-harbor-{plan.digest[:16]}.lock"))
        with lock:
            built = force or not self._exists(tag)
            if built:
                self._build(plan, tag)
        workdir = self.client.images.get(tag).attrs.get("Config", {}).get("WorkingDir") or "/"
        return TaskImage(tag, built, time.monotonic() - started, plan.translation.substitutions, workdir, plan.staging,
                         plan.translation.entrypoint)

    def _base_tags(self, task: HarborTask) -> dict[str, str]:
        """Ensures the gymfleet bases the task's FROMs need (a dry translation says which)."""
        if task.refusal or not task.dockerfile.is_file():
            return {}
        needed = translate(task.dockerfile.read_text(errors="replace"), {}).bases
        return {name: self._bases.ensure(name).tag for name in dict.fromkeys(needed) if name in SUITES.values()}

    def _exists(self, tag: str) -> bool:
        try:
            self.client.images.get(tag)
            return True
        except docker.errors.ImageNotFound:
            return False

    def _build(self, plan: _Plan, tag: str) -> None:
        self._log(f"building {tag}")
        context = self._context(plan)
        tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        try:
            stream = self.client.api.build(
                fileobj=context, custom_context=True, tag=tag, labels={LABEL_IMAGE_HASH: plan.digest},
                rm=True, forcerm=True, decode=True, pull=False, timeout=int(plan.task.build_timeout_s) + 60,
            )
            for chunk in stream:
                for line in str(chunk.get("stream", "")).splitlines():
                    tail.append(line)
                    self._log(line)
                if "error" in chunk:
                    raise UnbuildableError(_one_line(str(chunk["error"]), tail))
        except docker.errors.APIError as exc:
            raise UnbuildableError(_one_line(str(exc), tail)) from exc
        except OSError as exc:  # the read timed out: the build ran past its budget
            raise UnbuildableError(f"build did not finish in {plan.task.build_timeout_s:g} s ({exc})") from exc

    def _context(self, plan: _Plan) -> io.BytesIO:
        buffer = io.BytesIO()
        root = plan.task.context_dir
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path in _context_files(root):
                rel = path.relative_to(root).as_posix()
                if rel != "Dockerfile":
                    tar.add(path, arcname=rel, recursive=False)
            _add(tar, "Dockerfile", plan.dockerfile.encode())
            _add(tar, "gymfleet-host-ca.crt", HOST_CA_BUNDLE.read_bytes() if HOST_CA_BUNDLE.exists() else b"")
            if plan.staging.uv_version:
                for name, data in self.uv_binaries(plan.staging.uv_version).items():
                    _add(tar, f"gymfleet-stage/{name}", data, 0o755)
                _add(tar, "gymfleet-stage/env", UV_ENV_SCRIPT, 0o755)
        buffer.seek(0)
        return buffer

    def uv_binaries(self, version: str) -> dict[str, bytes]:
        """``uv`` and ``uvx`` of uv ``version`` (``latest``: the newest), from its PyPI wheel.

        Raises:
            UnbuildableError: the wheel could not be downloaded or holds no binaries.
        """
        folder = self.cache_dir / f"uv-{version}-{platform.machine()}"
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            requirement = "uv" if version == "latest" else f"uv=={version}"
            machine = platform.machine()
            run = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest",
                 str(folder), "--platform", f"manylinux_2_17_{machine}", "--platform", f"manylinux2014_{machine}",
                 requirement], capture_output=True, text=True, check=False,
            )
            if run.returncode != 0:
                raise UnbuildableError(f"uv {version} could not be staged from PyPI: {run.stderr.strip()[-300:]}")
        found: dict[str, bytes] = {}
        for wheel in folder.glob("uv-*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.namelist():
                    if member.endswith(("/scripts/uv", "/scripts/uvx")):
                        found[member.rsplit("/", 1)[1]] = archive.read(member)
        if set(found) != {"uv", "uvx"}:
            raise UnbuildableError(f"the uv {version} wheel in {folder} holds no uv/uvx binaries")
        return found


def _context_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink())


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


_CHATTER = re.compile(r"^(?: ?---> |Removing intermediate container|Step \d+/\d+ :|Running in |Successfully |Sending build context)")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_ERROR_LINE = re.compile(r"(?:^E: |^ERROR|\berror\b|\bError\b|No matching distribution|Unable to locate package|"
                         r"^fatal:|command not found|No such file or directory)")


def _one_line(error: str, tail: collections.abc.Iterable[str]) -> str:
    """The build's failure on one line: Docker's error, and the log line that says why (a
    staging step's own message, else the last line that reads as an error, else the last line
    that is not Docker's own chatter such as ``Removing intermediate container``)."""
    plain = (_ANSI.sub("", line).strip() for line in tail)
    lines = [line for line in plain if re.search("[A-Za-z]", line) and not _CHATTER.match(line)]
    why = (next((line for line in reversed(lines) if STAGING_FAILED in line), None)
           or next((line for line in reversed(lines) if _ERROR_LINE.search(line)), None)
           or (lines[-1] if lines else ""))
    text = " ".join(error.split())
    return f"{text[:300]}" + (f" ({why[:300]})" if why and why not in text else "")
