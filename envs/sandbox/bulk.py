"""Many files into a sandbox in one command: a tar piped through base64 into ``tar -x``.

``put_file`` costs a round trip and a few processes per file (the local agent runs
``mkdir``, ``cat`` and ``chmod`` as the sandbox user; Docker, an archive upload); a task's files
and hidden tests are a dozen small files per rollout. :func:`put_files` sends them as one
``exec``, run as the same user as the agent's commands, and falls back to ``put_file`` per file
when they are too large for one command line, when the sandbox is the unisolated fallback (whose
paths are host paths), or when the sandbox lacks ``tar`` or ``base64``.
"""

from __future__ import annotations

import base64
import io
import logging
import posixpath
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path

from gymfleet.envs.sandbox.base import Sandbox
from gymfleet.envs.task_files import folder_files as _task_folder_files

log = logging.getLogger(__name__)

MAX_INLINE_BYTES = 64 << 10
"""Most tar bytes sent inline: base64 makes them 4/3 larger, and Linux caps one argument of
``bash -c`` at 128 KiB."""


async def put_files(sandbox: Sandbox, files: Mapping[str, tuple[bytes, int]], timeout_s: float = 120.0) -> None:
    """Writes every ``path: (data, mode)`` of ``files`` (paths relative to ``spec.workdir`` or
    absolute; parent folders created), as ``put_file`` would.

    Raises:
        SandboxFileError: a file could not be written.
    """
    if not files:
        return
    archive = _tar(sandbox.spec.workdir, files) if sandbox.isolated else None
    if archive is not None and len(archive) <= MAX_INLINE_BYTES:
        payload = base64.b64encode(archive).decode("ascii")
        # a here-string, not printf in a pipeline: one fork fewer (printf would run in a subshell)
        result = await sandbox.exec(f"base64 -d <<< '{payload}' | tar -x --no-same-owner -m -f - -C /",
                                    timeout_s=timeout_s)
        if result.ok:
            return
        log.debug("bulk copy failed (exit %s: %s); copying file by file", result.exit_code, result.stderr[-300:])
    for path, (data, mode) in files.items():
        await sandbox.put_file(path, data, mode)


def folder_files(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder`` as ``relative/path: (data, mode)``; links out of it refused.

    The same as :func:`gymfleet.envs.task_files.folder_files` (the families' reader of task
    folders), kept here for callers of this module.

    Raises:
        TaskError: a link in ``folder`` leaves it or names a folder (one line naming it).
    """
    return _task_folder_files(folder)


def _tar(workdir: str, files: Mapping[str, tuple[bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path, (data, mode) in files.items():
            member = tarfile.TarInfo(posixpath.normpath(posixpath.join(workdir, path)).lstrip("/"))
            member.size, member.mode, member.mtime = len(data), mode, now
            tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()
