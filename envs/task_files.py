"""Reading task folders without following links out of them: every file of a task that a family
copies into a sandbox, shows to a policy, grades with or trains on is read through here.

A task folder (a terminal task, a Harbor or Terminal-Bench task, a slides brief folder) is
adversarial input: a link in it could hand a host file (``/etc/shadow``) to the policy, put it in
a verifier's stored output, or into gold demonstrations that are trained on. The rule: a link to a
file inside the folder is read as that file; any other link (out of the folder, or to a folder) is
refused with a :class:`TaskError` of one line naming it. Links are checked where the file is read,
so a folder changed after it was loaded is caught too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gymfleet.envs.errors import TaskError

__all__ = ["folder_files", "read_bytes", "read_text", "refuse_links"]


def _refused(root: Path, link: Path, why: str) -> TaskError:
    try:
        target = os.readlink(link)
    except OSError:
        target = "?"
    return TaskError(f"task folder {root}: {link.relative_to(root).as_posix()} is a link ({target}) {why}: "
                     "replace it with the file itself")


def _checked(root: Path, path: Path) -> Path:
    """``path`` (under ``root``), once no link on the way leaves ``root`` or names a folder.

    Raises:
        TaskError: a link on the way from ``root`` to ``path`` points out of ``root`` (or to a
            folder, or nowhere); names it.
    """
    base = root.resolve()
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if not current.is_symlink():
            continue
        target = current.resolve()
        if not target.is_relative_to(base):
            raise _refused(root, current, "out of the folder")
        if not target.is_file():
            raise _refused(root, current, "to a folder or to nothing")
    return path


def read_bytes(root: Path, path: Path) -> bytes:
    """The bytes of ``path``, a file under the task folder ``root``.

    Raises:
        TaskError: a link on the way leaves ``root`` (one line naming it).
        OSError: the file cannot be read (missing, a folder).
    """
    return _checked(root, path).read_bytes()


def read_text(root: Path, path: Path, encoding: str = "utf-8") -> str:
    """The text of ``path``, a file under the task folder ``root``.

    Raises:
        TaskError: a link on the way leaves ``root`` (one line naming it).
        OSError: the file cannot be read.
        UnicodeDecodeError: the file is not ``encoding``.
    """
    return read_bytes(root, path).decode(encoding)


def folder_files(folder: Path, root: Path | None = None) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder`` as ``relative/path: (data, mode)``, modes 0o755 (executable
    on the host) or 0o644, sorted by path; links to folders are not descended.

    Args:
        folder: the folder to read (``files/``, ``tests/``, ``solution/``).
        root: the task folder that links may not leave (default: ``folder`` itself).

    Raises:
        TaskError: a link leaves ``root`` or names a folder (one line naming it).
    """
    root = root or folder
    if folder != root:
        _checked(root, folder)
    found: dict[str, tuple[bytes, int]] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        here = Path(dirpath)
        for name in sorted(dirnames) + sorted(filenames):
            path = here / name
            if path.is_symlink():
                _checked(root, path)  # raises for every link but one to a file inside
            elif name in dirnames or not stat.S_ISREG(path.lstat().st_mode):
                continue
            data = path.read_bytes()
            found[path.relative_to(folder).as_posix()] = (data, 0o755 if path.stat().st_mode & 0o111 else 0o644)
    return dict(sorted(found.items()))


def refuse_links(root: Path) -> None:
    """Checks a whole task folder at load time: every link in it is a link to a file inside it.

    Raises:
        TaskError: the first link (in sorted order) that leaves ``root`` or names a folder.
    """
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in sorted(dirnames) + sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink():
                _checked(root, path)
