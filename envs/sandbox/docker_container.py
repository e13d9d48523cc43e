"""A sandbox's container: the run options a :class:`SandboxSpec` turns into, and its creation
with the errors named (missing image: build it; limits refused: lower them).

Writable space (``spec.disk_mb``): where the daemon's storage supports quotas (overlay2 on xfs
with ``pquota``, btrfs, zfs) the whole writable layer gets ``storage_opt size``; elsewhere /tmp
and the workdir (and the commands' output folder) are each an anonymous volume on a size-limited
tmpfs (Docker's archive API, which
``put_file``/``get_file`` use, sees volumes, not ``--tmpfs`` mounts; the volumes go with the
container). A workdir the image already fills (SWE repositories) is left on the container's
layer: a tmpfs over it would hide the files, and copying them in would cost every start. An
empty workdir folder the image has keeps its owner and mode on its volume (a non-root ``USER``
writes its own workdir).

The commands' output folder (``EXEC_ROOT``) is mode 1777 like /tmp, on either path, so that an
image whose ``USER`` is not root can run commands: each command makes its own sub-folder, and the
sticky bit keeps a non-root command from removing or renaming what root (a verifier's command)
made there. Every command of a sandbox runs as the same user, so the bit does not part one
agent command from another; none needs to be: they are all the agent's.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import tarfile
import threading
import uuid
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import DriverConfig, Mount

from gymfleet.envs.errors import SandboxStartError
from gymfleet.envs.sandbox.base import SandboxLabels, SandboxSpec, owner_labels
from gymfleet.envs.sandbox.docker_exec import EXEC_ROOT, KEEPALIVE_ARGV
from gymfleet.envs.sandbox.docker_files import folder_archive

COMMAND_ENV = {"PYTHONUNBUFFERED": "1"}
"""Every command's environment (a spec's ``env`` may override): Python prints at once, so output
printed before a timeout kills the command is kept."""


@dataclass(frozen=True)
class FolderOwner:
    """A folder's owner and permission bits in an image (a tmpfs over it gets the same)."""

    uid: int
    gid: int
    mode: int
    """Permission bits, sticky bit included (``0o1777``)."""


@dataclass
class StorageFacts:
    """What a backend learned about its daemon's storage, once per daemon and image."""

    quota: bool | None = None
    """Whether ``storage_opt size`` works; None until the first sandbox tries."""
    filled_workdirs: dict[tuple[str, str], bool] = field(default_factory=dict)
    """(image, workdir) -> whether the image has files there."""
    workdir_owners: dict[tuple[str, str], FolderOwner] = field(default_factory=dict)
    """(image, workdir) -> who owns that (empty) folder in the image, when it has one."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held while learning (many sandboxes starting at once probe once)."""


def container_options(spec: SandboxSpec, labels: SandboxLabels, *, quota: bool, tmpfs_workdir: bool,
                      workdir_owner: FolderOwner | None = None) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.create`` for a sandbox of ``spec``.

    The main process is gymfleet's keep-alive as PID 1 (no Docker init: tini exits with its
    child, which an agent can kill); the labels add the owner's pid, start time and host for the
    reaper.

    Args:
        quota: bound the writable layer with ``storage_opt`` instead of tmpfs volumes.
        tmpfs_workdir: put the workdir on its own tmpfs volume (the image has nothing there).
        workdir_owner: the image's (empty) workdir folder, whose owner and mode that volume
            keeps (a non-root ``USER``'s own workdir stays writable to it); None: root, 0755.
    """
    name = re.sub(r"[^a-zA-Z0-9_.-]", "-", f"gymfleet-{labels.run_id}-{labels.rollout_id}")[:100]
    options: dict[str, Any] = dict(
        command=KEEPALIVE_ARGV,
        init=False,
        name=f"{name}-{uuid.uuid4().hex[:6]}",
        labels=labels.as_dict() | owner_labels(),
        working_dir=spec.workdir,
        environment=COMMAND_ENV | spec.env,
        network_mode=None if spec.network else "none",
        nano_cpus=int(spec.cpus * 1e9),
        mem_limit=f"{spec.memory_mb}m",
        memswap_limit=f"{spec.memory_mb}m",
        pids_limit=spec.pids_limit,
        detach=True,
    )
    if spec.cpus <= 0:
        # No limit: on a cgroup v1 host, tools that count CPUs from cpu.shares (pylint's
        # _query_cpu: shares / 1024) would see Docker's default 1024 as one core and skip tests
        # that need two; a weight of 1024 per host core reads as the cores the sandbox may use.
        options["cpu_shares"] = 1024 * (os.cpu_count() or 1)
    if spec.net_admin:
        options["cap_add"] = ["NET_ADMIN"]
    if quota:
        options["storage_opt"] = {"size": f"{spec.disk_mb}M"}
    else:
        targets = ["/tmp", EXEC_ROOT, *([spec.workdir] if tmpfs_workdir else [])]
        # one volume per folder: a workdir of /tmp (a Harbor task's WORKDIR /tmp) is /tmp's own
        # volume (Docker refuses a create with two mounts at one target: 400 Duplicate mount point)
        unique = dict.fromkeys(posixpath.normpath(t) for t in targets)
        owners = {posixpath.normpath(spec.workdir): workdir_owner} if workdir_owner else {}
        options["mounts"] = [_tmpfs_volume(target, spec.disk_mb, owners.get(target)) for target in unique]
    return options


def _tmpfs_volume(target: str, size_mb: int, owner: FolderOwner | None = None) -> Mount:
    if target in ("/tmp", EXEC_ROOT):
        owner = FolderOwner(0, 0, 0o1777)
    owner = owner or FolderOwner(0, 0, 0o755)
    o = f"size={size_mb}m,mode={owner.mode:o},uid={owner.uid},gid={owner.gid}"
    driver = DriverConfig("local", {"type": "tmpfs", "device": "tmpfs", "o": o})
    return Mount(target=target, source=None, type="volume", driver_config=driver)


def create_container(
    client: docker.DockerClient, spec: SandboxSpec, labels: SandboxLabels, facts: StorageFacts
) -> tuple[Container, str]:
    """Creates and starts the container of a sandbox (never pulls).

    Returns:
        The container and its ``StartedAt`` (to tell a restart from outside later).

    Raises:
        SandboxStartError: the image is missing (the message says how to build it), or Docker
            refused the limits or failed to start it (nothing is left behind).
    """
    try:
        container = _create(client, spec, labels, facts)
    except docker.errors.ImageNotFound as exc:
        raise SandboxStartError(f"image {spec.image} not found: {build_hint(spec.image)}") from exc
    except docker.errors.APIError as exc:
        raise SandboxStartError(
            f"Docker refused to create a sandbox of {spec.image} (check the spec's cpus, memory_mb, "
            f"pids_limit, disk_mb against this host): {exc}"
        ) from exc
    try:
        if facts.quota:  # on the container's layer: made before the start, as the image's user cannot
            container.put_archive("/", folder_archive(EXEC_ROOT, 0o1777))
        container.start()
        started_at = client.api.inspect_container(container.id)["State"]["StartedAt"]
    except docker.errors.APIError as exc:
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True, v=True)
        raise SandboxStartError(f"sandbox of {spec.image} did not start: {exc}") from exc
    return container, started_at


def _create(client: docker.DockerClient, spec: SandboxSpec, labels: SandboxLabels, facts: StorageFacts) -> Container:
    key = (spec.image, spec.workdir)
    if _must_learn(facts, key):
        with facts.lock:
            # Checked again under the lock: the sandboxes that queued behind the one that learned
            # create in parallel (one create per sandbox inside the lock made 64 starts at once
            # wait on each other).
            if _must_learn(facts, key):
                return _create_learning(client, spec, labels, facts)
    assert facts.quota is not None
    options = container_options(spec, labels, quota=facts.quota, tmpfs_workdir=not facts.filled_workdirs.get(key, True),
                                workdir_owner=facts.workdir_owners.get(key))
    return client.containers.create(spec.image, **options)


def _must_learn(facts: StorageFacts, key: tuple[str, str]) -> bool:
    return facts.quota is None or (not facts.quota and key not in facts.filled_workdirs)


def _create_learning(client: docker.DockerClient, spec: SandboxSpec, labels: SandboxLabels,
                     facts: StorageFacts) -> Container:
    if facts.quota is not False:
        try:
            container = client.containers.create(
                spec.image, **container_options(spec, labels, quota=True, tmpfs_workdir=False))
            facts.quota = True
            return container
        except docker.errors.APIError as exc:
            if facts.quota or "storage-opt" not in str(exc).lower():
                raise
            facts.quota = False  # overlay over ext4 and the like: tmpfs volumes instead
    key = (spec.image, spec.workdir)
    if key not in facts.filled_workdirs:
        filled, owner = probe_folder(client, spec.image, spec.workdir)
        facts.filled_workdirs[key] = filled
        if owner is not None:
            facts.workdir_owners[key] = owner
    options = container_options(spec, labels, quota=False, tmpfs_workdir=not facts.filled_workdirs[key],
                                workdir_owner=facts.workdir_owners.get(key))
    return client.containers.create(spec.image, **options)


def image_has_files(client: docker.DockerClient, image: str, folder: str) -> bool:
    """True when ``image`` has anything under ``folder`` (read from a container that never starts).

    Raises:
        docker.errors.ImageNotFound: no such image.
    """
    return probe_folder(client, image, folder)[0]


def probe_folder(client: docker.DockerClient, image: str, folder: str) -> tuple[bool, FolderOwner | None]:
    """Whether ``image`` has anything under ``folder``, and the folder's owner and mode (None
    when the image has no such folder); read from a container that never starts.

    Raises:
        docker.errors.ImageNotFound: no such image.
    """
    probe = client.api.create_container(image, command=["true"], network_disabled=True)["Id"]
    chunks: Any = iter(())
    try:
        stream, _ = client.api.get_archive(probe, folder.rstrip("/") + "/.")
        chunks = iter(stream)
        with tarfile.open(fileobj=_Chunks(chunks), mode="r|") as tar:  # type: ignore[call-overload]
            first = tar.next()  # the folder itself
            owner = FolderOwner(first.uid, first.gid, first.mode & 0o7777) if first is not None and first.isdir() else None
            return tar.next() is not None, owner
    except docker.errors.NotFound:
        return False, None
    finally:
        # Read the archive to its end before removing the probe: the daemon's tar holds the
        # probe's root file system until its output is read, and a remove waits for it forever.
        for _ in chunks:
            pass
        with contextlib.suppress(docker.errors.DockerException):
            client.api.remove_container(probe, force=True, v=True)


class _Chunks:
    """A file-like read() over an iterator of byte chunks (a streamed tar)."""

    def __init__(self, chunks: Any) -> None:
        self._chunks = iter(chunks)
        self._buffer = b""

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buffer) < n:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        if n < 0:
            data, self._buffer = self._buffer, b""
        else:
            data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data


def build_hint(image: str) -> str:
    """How to get ``image``: gymfleet's own images are built, others pulled."""
    match = re.fullmatch(r"gymfleet/([\w.-]+)(?::[\w.-]+)?", image)
    if match:
        return f"build it with `gymfleet images build {match.group(1)}`"
    return f"pull or build it (`docker pull {image}`)"


T = TypeVar("T")


class _KillGrace(Protocol):
    @property
    def kill_grace_s(self) -> float: ...


class DockerHost(Protocol):
    """What a :class:`DockerSandbox` needs of its backend
    (:class:`~gymfleet.envs.sandbox.docker.DockerBackend` is the one; a Protocol, so that this
    module does not import the backend that imports it)."""

    @property
    def config(self) -> _KillGrace:
        """The backend's settings; ``kill_grace_s`` bounds the wait for a killed command."""
        ...

    @property
    def storage(self) -> StorageFacts:
        """What the daemon's storage driver supports (disk limits)."""
        ...

    def client(self) -> docker.DockerClient:
        """The shared Docker client."""
        ...

    async def run_blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Runs a blocking docker SDK call on the backend's thread pool."""
        ...

    async def sweep_once(self) -> None:
        """Removes orphaned containers once per backend, before the first start."""
        ...
