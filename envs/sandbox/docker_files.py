"""Single files into and out of a container, as the one-member tar archives Docker's copy API
speaks (``put_archive`` / ``get_archive``: no process runs in the container)."""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
from collections.abc import Iterator

import docker.errors
from docker.models.containers import Container

from gymfleet.core.errors import SandboxError
from gymfleet.envs.errors import (
    SandboxDamagedError,
    SandboxFileError,
    SandboxLostError,
    SandboxUnavailableError,
)
from gymfleet.envs.sandbox.docker_errors import docker_errors


def file_archive(path: str, data: bytes, mode: int) -> bytes:
    """A tar holding ``data`` at absolute ``path``, to extract at ``/``. It holds no folder
    entries: Docker creates missing parents (0755) and leaves existing ones as they are."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(path.lstrip("/"))
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def folder_archive(path: str, mode: int, files: dict[str, bytes] | None = None) -> bytes:
    """A tar holding the folder at absolute ``path`` (owned by root, ``mode`` kept, sticky bit
    included) and ``files`` (name -> bytes, 0644) inside it, to extract at ``/``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        folder = tarfile.TarInfo(path.strip("/"))
        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, mode, int(time.time())
        tar.addfile(folder)
        for name, data in (files or {}).items():
            info = tarfile.TarInfo(f"{path.strip('/')}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def read_regular_file(container: Container, path: str, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file at absolute ``path`` in ``container``.

    Raises:
        SandboxFileError: ``path`` is a folder, not a regular file, or larger than ``max_bytes``.
        docker.errors.NotFound: no such path.
    """
    stream, stat = container.get_archive(path)
    if max_bytes is not None and int(stat.get("size", 0)) > max_bytes:
        raise SandboxFileError(f"{path} in the sandbox has {stat['size']} bytes, more than {max_bytes} to read")
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream)), mode="r") as tar:
        member = tar.next()
        if member is None or not member.isfile():
            kind = "a folder" if member is not None and member.isdir() else "not a regular file"
            raise SandboxFileError(f"{path} in the sandbox is {kind}")
        extracted = tar.extractfile(member)
        assert extracted is not None  # a regular file always has contents
        return extracted.read()


@contextlib.contextmanager
def file_errors(verb: str, path: str, short_id: str = "") -> Iterator[None]:
    """Turns the errors of one copy into the sandbox error tree, naming the file.

    Raises:
        SandboxFileError: no such file or folder, or Docker refused the copy.
        SandboxDamagedError: the sandbox's space there is full (the agent's own files).
        SandboxLostError: the container is gone or stopped.
        SandboxUnavailableError: the daemon stopped answering.
    """
    try:
        with docker_errors(f"{verb} {path}", short_id):
            yield
    except (SandboxFileError, SandboxLostError, SandboxUnavailableError):
        raise
    except docker.errors.NotFound as exc:
        raise SandboxFileError(f"could not {verb} {path} in the sandbox: no such file or folder") from exc
    except SandboxError as exc:
        if "no space left" in str(exc).lower():
            raise SandboxDamagedError(
                f"could not {verb} {path}: the sandbox's space there is full (its commands filled "
                "it)") from exc
        raise SandboxFileError(f"could not {verb} {path} in the sandbox: {exc.__cause__ or exc}") from exc
