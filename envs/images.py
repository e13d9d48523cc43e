"""Container images under ``images/``: content-hash tags, builds on demand, the debootstrap base.

Each folder of ``images/`` is one image. ``images/base`` holds a ``base.yaml`` (a Debian rootfs
made with ``debootstrap`` and imported, since no registry can be pulled from); every other folder
holds a ``Dockerfile`` whose ``FROM gymfleet/<parent>`` line names its parent image.

An image is tagged ``gymfleet/<name>:<hash>``, the hash covering the folder's files (README.md
excepted), its parents' hashes and, when the Dockerfile asks for it, the host's CA bundle; the
hash is also stored as the label ``gymfleet.image.hash``, and ``:latest`` follows the newest
build. So :func:`ensure_image` costs one API call when nothing changed and rebuilds exactly what
did. Builds of one image are serialised across processes by a file lock.

A Dockerfile that mentions ``host-ca.crt`` gets the host's ``/etc/ssl/certs/ca-certificates.crt``
under that name in its build context (pip and curl behind a TLS-inspecting proxy need it).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Self, TextIO

import docker
import docker.errors
import yaml
from filelock import FileLock

from gymfleet.core.strict import StrictModel
from gymfleet.envs.errors import ImageBuildError
from gymfleet.envs.resources import EnvResources, SharedResource

IMAGE_REPO = "gymfleet"
LABEL_IMAGE_NAME = "gymfleet.image.name"
LABEL_IMAGE_HASH = "gymfleet.image.hash"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOST_CA_NAME = "host-ca.crt"
DEFAULT_IMAGES_DIR = Path(__file__).resolve().parent.parent / "images"
LOG_TAIL_LINES = 30
_FROM = re.compile(r"^(\s*FROM\s+(?:--platform=\S+\s+)?)gymfleet/([\w.-]+)(?::[\w.-]+)?", re.I | re.M)
_NOT_HASHED = {"README.md"}

Log = Callable[[str], None]


class BuildProgress:
    """The :data:`Log` of a build nobody asked to watch (a first ``envs check``, a task image
    built on first use): plain lines on stderr, so minutes of building are not silence.

    Prints the builder's own lines (``building``, ``importing``, ``built``) and docker's
    ``Step N/M`` lines as they come, and of the rest (the build's output, debootstrap's) at most
    one line every ``interval_s`` seconds; each prefixed ``image NAME (S s):``.

    Args:
        name: the image (``images/<name>``).
        interval_s: seconds between two lines of build output.
        out: where lines go (default ``sys.stderr``).
        clock: seconds, monotonic (``time.monotonic``).
    """

    _ALWAYS = re.compile(r"^(building |importing |built |Step \d+/\d+ :)")

    def __init__(self, name: str, interval_s: float = 10.0, out: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.interval_s = interval_s
        self.out = out
        self.clock = clock
        self.started = clock()
        self._last = -float("inf")

    def __call__(self, line: str) -> None:
        now = self.clock()
        if not line.strip() or (not self._ALWAYS.match(line) and now - self._last < self.interval_s):
            return
        self._last = now
        print(f"image {self.name} ({now - self.started:.0f} s): {line.strip()[:160]}",
              file=self.out or sys.stderr, flush=True)


class BaseImageConfig(StrictModel):
    """``images/base/base.yaml``: how debootstrap makes the base rootfs."""

    suite: str = "bookworm"
    """Debian release."""
    variant: str = "minbase"
    """debootstrap variant; minbase is essential packages plus apt."""
    mirror: str = "http://deb.debian.org/debian"
    """Debian mirror debootstrap downloads from (and the image's apt sources)."""
    include: list[str] = []
    """Extra packages installed into the base."""
    drop_paths: list[str] = []
    """Paths (relative to the rootfs, globs allowed) deleted before import, to keep it small."""
    env: dict[str, str] = {}
    """Environment variables of the image (``ENV`` on import): PATH, locale, pip retries."""


@dataclass(frozen=True)
class ImageDef:
    """One folder of ``images/``."""

    name: str
    folder: Path
    parents: tuple[str, ...]
    """Names of the gymfleet images its Dockerfile builds FROM; empty for the base."""

    @property
    def is_base(self) -> bool:
        """True for a debootstrap rootfs (``base.yaml``) rather than a Dockerfile."""
        return (self.folder / "base.yaml").exists()


@dataclass(frozen=True)
class BuiltImage:
    """The outcome of :meth:`ImageBuilder.ensure`."""

    name: str
    tag: str
    """``gymfleet/<name>:<hash>``."""
    built: bool
    """True when this call built it; False when the tag already existed."""


class ImageBuilder:
    """Builds the images of one ``images/`` folder through the docker SDK."""

    def __init__(
        self,
        client: docker.DockerClient | None = None,
        images_dir: Path | None = None,
        log: Log | None = None,
    ) -> None:
        self.images_dir = Path(images_dir or DEFAULT_IMAGES_DIR)
        self._client = client
        self._log = log or (lambda line: None)

    @property
    def client(self) -> docker.DockerClient:
        """The SDK client (from the environment unless one was given)."""
        if self._client is None:
            try:
                self._client = docker.from_env(timeout=600)
            except docker.errors.DockerException as exc:
                raise ImageBuildError(
                    f"Docker daemon not reachable ({exc}): start it (`make services`) or set DOCKER_HOST"
                ) from exc
        return self._client

    def names(self) -> list[str]:
        """Every image under ``images_dir``, parents before children."""
        found = sorted(
            p.name for p in self.images_dir.iterdir() if (p / "Dockerfile").exists() or (p / "base.yaml").exists()
        )
        ordered: list[str] = []

        def visit(name: str) -> None:
            if name not in ordered:
                for parent in self.definition(name).parents:
                    visit(parent)
                ordered.append(name)

        for name in found:
            visit(name)
        return ordered

    def definition(self, name: str) -> ImageDef:
        """The image called ``name``.

        Raises:
            ImageBuildError: no such folder, or it has neither a Dockerfile nor a base.yaml.
        """
        folder = self.images_dir / name
        dockerfile = folder / "Dockerfile"
        if dockerfile.exists():
            parents = tuple(dict.fromkeys(m.group(2) for m in _FROM.finditer(dockerfile.read_text())))
            return ImageDef(name, folder, parents)
        if (folder / "base.yaml").exists():
            return ImageDef(name, folder, ())
        known = ", ".join(p.name for p in sorted(self.images_dir.glob("*")) if p.is_dir()) or "none"
        raise ImageBuildError(
            f"no image {name!r} under {self.images_dir} (known: {known}); add images/{name}/Dockerfile"
        )

    def content_hash(self, name: str, _seen: tuple[str, ...] = ()) -> str:
        """SHA-256 (hex) of the image's files, its parents' hashes and, if used, the CA bundle.

        Raises:
            ImageBuildError: the parents form a cycle.
        """
        if name in _seen:
            raise ImageBuildError(f"images FROM each other in a cycle: {' -> '.join((*_seen, name))}")
        image = self.definition(name)
        digest = hashlib.sha256()
        for parent in image.parents:
            digest.update(f"parent {parent} {self.content_hash(parent, (*_seen, name))}\n".encode())
        for path in sorted(p for p in image.folder.rglob("*") if p.is_file()):
            rel = path.relative_to(image.folder).as_posix()
            if rel in _NOT_HASHED:
                continue
            digest.update(f"file {rel} {path.stat().st_mode & 0o111:o}\n".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        if _uses_host_ca(image):
            digest.update(b"host-ca " + hashlib.sha256(HOST_CA_BUNDLE.read_bytes()).digest())
        return digest.hexdigest()

    def tag(self, name: str) -> str:
        """``gymfleet/<name>:<first 12 hex digits of the content hash>``."""
        return f"{IMAGE_REPO}/{name}:{self.content_hash(name)[:12]}"

    def exists(self, tag: str) -> bool:
        """True when the daemon has an image tagged ``tag``."""
        try:
            self.client.images.get(tag)
            return True
        except docker.errors.ImageNotFound:
            return False

    def ensure(self, name: str, force: bool = False) -> BuiltImage:
        """Builds ``name`` (and any missing parent) unless its current tag exists.

        Args:
            name: a folder of ``images_dir``.
            force: rebuild this image even if its tag exists (parents are only ensured).

        Raises:
            ImageBuildError: the build failed; the message ends with the build log's tail.
        """
        for parent in self.definition(name).parents:
            self.ensure(parent)
        tag = self.tag(name)
        lock = FileLock(str(Path(tempfile.gettempdir()) / f"gymfleet-image-{name}.lock"))
        with lock:
            if not force and self.exists(tag):
                self._tag_latest(name, tag)
                return BuiltImage(name, tag, built=False)
            self._log(f"building {tag} (missing here: built once, minutes)")
            t0 = time.monotonic()
            image = self.definition(name)
            if image.is_base:
                self._build_base(image, tag)
            else:
                self._build_dockerfile(image, tag)
            self._tag_latest(name, tag)
            self._log(f"built {tag} in {time.monotonic() - t0:.0f} s")
        return BuiltImage(name, tag, built=True)

    def _tag_latest(self, name: str, tag: str) -> None:
        self.client.api.tag(tag, f"{IMAGE_REPO}/{name}", "latest")

    def _labels(self, image: ImageDef, tag: str) -> dict[str, str]:
        return {LABEL_IMAGE_NAME: image.name, LABEL_IMAGE_HASH: self.content_hash(image.name)}

    def _build_dockerfile(self, image: ImageDef, tag: str) -> None:
        """``docker build`` of the folder, its FROM lines pinned to the parents' exact tags."""
        context = self._context(image)
        tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        try:
            stream = self.client.api.build(
                fileobj=context, custom_context=True, tag=tag, labels=self._labels(image, tag),
                rm=True, forcerm=True, decode=True, pull=False,
            )
            for chunk in stream:
                for line in str(chunk.get("stream", "")).splitlines():
                    tail.append(line)
                    self._log(line)
                if "error" in chunk:
                    tail.append(str(chunk["error"]))
                    raise ImageBuildError(_failure(image, chunk["error"], tail))
        except docker.errors.APIError as exc:
            raise ImageBuildError(_failure(image, str(exc), tail)) from exc

    def _context(self, image: ImageDef) -> io.BytesIO:
        """The build context: the folder, the pinned Dockerfile, and the CA bundle if used."""
        buffer = io.BytesIO()
        dockerfile = _FROM.sub(lambda m: m.group(1) + self.tag(m.group(2)), (image.folder / "Dockerfile").read_text())
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path in sorted(image.folder.rglob("*")):
                rel = path.relative_to(image.folder).as_posix()
                if rel != "Dockerfile":
                    tar.add(path, arcname=rel, recursive=False)
            _add_bytes(tar, "Dockerfile", dockerfile.encode())
            if _uses_host_ca(image):
                _add_bytes(tar, HOST_CA_NAME, HOST_CA_BUNDLE.read_bytes())
        buffer.seek(0)
        return buffer

    def _build_base(self, image: ImageDef, tag: str) -> None:
        """debootstrap a rootfs, lay ``rootfs/`` over it, trim it, and import it as ``tag``."""
        config = BaseImageConfig.model_validate(yaml.safe_load((image.folder / "base.yaml").read_text()) or {})
        with tempfile.TemporaryDirectory(prefix="gymfleet-base-", dir="/var/tmp") as tmp:
            root = Path(tmp) / "rootfs"
            try:
                self._debootstrap(image, config, root)
            finally:
                _unmount_under(root)
            if (image.folder / "rootfs").is_dir():
                shutil.copytree(image.folder / "rootfs", root, dirs_exist_ok=True, symlinks=True)
            for pattern in config.drop_paths:
                for path in root.glob(pattern):
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            archive = Path(tmp) / "rootfs.tar"
            subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(archive), "."], check=True)
            repository, _, version = tag.partition(":")
            changes = [
                *(f"ENV {key}={value}" for key, value in config.env.items()),
                'CMD ["bash"]',
                *(f"LABEL {key}={value}" for key, value in self._labels(image, tag).items()),
            ]
            self._log(f"importing {archive.stat().st_size / 1e6:.0f} MB rootfs as {tag}")
            try:
                self.client.api.import_image_from_file(str(archive), repository=repository, tag=version, changes=changes)
            except docker.errors.APIError as exc:
                raise ImageBuildError(f"docker import of {tag} failed: {exc}") from exc

    def _debootstrap(self, image: ImageDef, config: BaseImageConfig, root: Path) -> None:
        if shutil.which("debootstrap") is None:
            raise ImageBuildError("debootstrap is missing: apt-get install debootstrap (or `make services`)")
        argv = ["debootstrap", f"--variant={config.variant}"]
        if config.include:
            argv.append(f"--include={','.join(config.include)}")
        argv += [config.suite, str(root), config.mirror]
        tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                tail.append(line.rstrip())
                self._log(line.rstrip())
        if proc.returncode != 0:
            hint = "it needs root" if "root" in "\n".join(tail) else f"check that {config.mirror} is reachable"
            raise ImageBuildError(_failure(image, f"debootstrap exited {proc.returncode} ({hint})", tail))


def _uses_host_ca(image: ImageDef) -> bool:
    dockerfile = image.folder / "Dockerfile"
    return dockerfile.exists() and HOST_CA_NAME in dockerfile.read_text()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def _failure(image: ImageDef, error: str, tail: collections.abc.Iterable[str]) -> str:
    lines = "\n".join(tail)
    return (
        f"image {image.name} failed to build: {str(error).strip()}\n"
        f"fix {image.folder}/ and run `gymfleet images build {image.name}`.\n"
        f"--- last lines of the build log ---\n{lines}"
    )


def _unmount_under(root: Path) -> None:
    """Unmounts whatever a failed debootstrap left mounted inside ``root`` (proc, sys), so that
    deleting the folder cannot reach the host's own /proc or /sys."""
    prefix = str(root.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", mount], check=False)


def ensure_image(name: str, force: bool = False, images_dir: Path | None = None, log: Log | None = None) -> str:
    """Builds ``images/<name>`` (and its parents) if its current tag is missing; returns the tag.

    Blocking (seconds when built, minutes when not): from async code use
    ``await asyncio.to_thread(ensure_image, name)``. Use the returned tag rather than
    ``gymfleet/<name>:latest``, which follows whichever build ran last on the daemon.

    Args:
        log: where build lines go; default :class:`BuildProgress` (plain lines on stderr, only
            when something is built).

    Raises:
        ImageBuildError: the daemon is unreachable or the build failed (message ends with the
            build log's tail).
    """
    return ImageBuilder(images_dir=images_dir, log=log or BuildProgress(name)).ensure(name, force=force).tag


class ImageTags(SharedResource):
    """The task images' content-hash tags, each built at most once per process when missing
    (``resources.get(ImageTags)``); concurrent callers of one image share its build."""

    def __init__(self) -> None:
        self._tags: dict[str, asyncio.Future[str]] = {}

    @classmethod
    def create(cls, resources: EnvResources) -> Self:
        return cls()

    async def tag(self, name: str) -> str:
        """The tag of ``images/<name>`` (:func:`ensure_image` in a thread).

        Raises:
            ImageBuildError: the build failed (the next caller retries it).
        """
        if name not in self._tags:
            self._tags[name] = asyncio.ensure_future(asyncio.to_thread(ensure_image, name))
        try:
            return await asyncio.shield(self._tags[name])
        except Exception:
            self._tags.pop(name, None)  # a failed build is retried by the next caller
            raise
