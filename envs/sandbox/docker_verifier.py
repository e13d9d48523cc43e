"""A verifier's sandbox that keeps the agent's system changes but not its hold on the verifier's tools.

Some tasks legitimately change files outside their workdir (a config under ``/etc``, a script in
``/usr/local/bin``, a package installed from a local wheel), and their tests check those; a
hostile agent changes the same places to replace what the tests run. The changes the container
made to its image (``docker_layer.py``, read on the host) are sorted by :class:`ToolchainRules`:

- **never carried** (the verifier sees the image's version, or nothing): a file the image has
  under the system code roots (``/bin``, ``/sbin``, ``/lib*``, ``/usr``, and the image's own
  ``PATH``, ``PYTHONPATH`` and ``LD_LIBRARY_PATH`` folders) or in any folder Python imports from
  (every ``site-packages``/``dist-packages``, every ``<prefix>/lib/python3*``: a venv the image
  made under ``/opt``, conda's), modified or deleted; Python start-up hooks anywhere
  (``sitecustomize``, ``usercustomize``; every ``.pth``, since even a path line can put a folder
  holding a ``sitecustomize`` on ``sys.path``; a ``pytest11`` entry point); pytest's
  configuration at the filesystem root (``/pytest.ini``, ``/conftest.py``: :data:`ROOT_CONFIG`); compiled Python and new modules of a standard library folder (ahead of site-packages); the
  configuration of the loader, shell, Python, pip, uv, apt and git (``/etc/ld.so.*``,
  ``/etc/profile*``, ``/etc/python3*``, ``/etc/apt``, ...); a home folder's start-up and
  configuration files (shell rc files, ``.local``, pip/uv/git config: :data:`HOME_STARTUP`), not
  its other dotfiles (``~/.ssh/authorized_keys`` is graded as written);
  and a new file on ``PATH`` or in a Python folder that *shadows* one the image has elsewhere
  (``/usr/local/bin/python3`` before ``/usr/bin/python3``);
- **carried**: everything else, new files in the code roots and package folders included (a new
  package the agent installed), deletions too. The workdir is the agent's: all of it is carried
  (a ``.pth`` with an ``import`` line aside), a venv inside it included.

When nothing falls in the first group the verifier runs in the agent's own container (after
its processes are stopped); else in a fresh container of the image into which the carried
changes are copied by archive (no process of either container touches them on the way).
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import tarfile
import shlex
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from docker.models.containers import Container

from gymfleet.core.errors import SandboxError
from gymfleet.envs.sandbox.base import Sandbox
from gymfleet.envs.sandbox.docker_exec import EXEC_ROOT
from gymfleet.envs.sandbox.docker_layer import Layer, LayerEntry
from gymfleet.envs.sandbox.docker_seal import copy_folder

CODE_ROOTS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr")
"""Folders of the system's programs, libraries and Python: an image file there is never replaced."""
CONFIG_GLOBS = ("/etc/ld.so.*", "/etc/alternatives", "/etc/apt", "/etc/dpkg", "/etc/profile", "/etc/profile.d",
                "/etc/bash.bashrc", "/etc/environment", "/etc/python*", "/etc/pip.conf", "/etc/uv", "/etc/gitconfig",
                "/etc/shells", "/etc/bash_completion*")
"""Configuration the verifier's loader, shells and package tools read."""
_CONFIG = re.compile("|".join(fnmatch.translate(g) for glob in CONFIG_GLOBS for g in (glob, glob + "/*")))
""":data:`CONFIG_GLOBS` and everything under them, as one pattern: ``fnmatch`` over 28 globs was
most of :meth:`ToolchainRules.reason`'s time per changed path."""
PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
PY_DIR_GLOBS = ("/usr/local/lib/python3*/site-packages", "/usr/local/lib/python3*/dist-packages",
                "/usr/lib/python3/dist-packages", "/usr/lib/python3*/site-packages", "/usr/lib/python3*/dist-packages",
                "/usr/local/lib/python3.*", "/usr/lib/python3.*")
"""Folders Python imports from (the standard library's last: it comes first on ``sys.path``)."""
_HOOK = re.compile(r"^(sitecustomize|usercustomize)(\..*)?$")
_HOME_DOT = re.compile(r"^/(?:root|home/[^/]+)/(\.[^/]+)(?:/([^/]+))?")
HOME_STARTUP = frozenset({
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc", ".zshenv", ".zprofile",
    ".zlogin", ".inputrc", ".pydistutils.cfg", ".pypirc", ".pip", ".netrc", ".curlrc", ".wgetrc", ".npmrc",
    ".condarc", ".gitconfig", ".pythonrc", ".pythonrc.py", ".local", ".cache",
})
"""Dotfiles and dot folders of a home folder that shells, Python, pip, uv, git, curl and the
package managers read at start-up or keep code in (``.local/bin``, ``.local/lib``, uv's and pip's
caches); ``.config`` counts through :data:`HOME_CONFIG`. Any other dotfile (``.ssh/authorized_keys``,
an app's data) is the agent's work and is graded as written."""
HOME_CONFIG = frozenset({"pip", "uv", "git", "python", "pytest", "matplotlib", "fish", "environment.d"})
"""Folders under ``~/.config`` that the verifier's tools read."""
ROOT_CONFIG = frozenset({"pytest.ini", ".pytest.ini", "conftest.py", "pyproject.toml", "tox.ini", "setup.cfg",
                         "sitecustomize.py", "usercustomize.py"})
"""Files at the filesystem root that pytest (which looks for its configuration and ``conftest.py``
in the folders above ``/tests``) or Python reads; any other file there is graded as written."""
_SITE = re.compile(r"/(site|dist)-packages(/|$)")
"""A Python package folder, wherever it is (a venv the image made under ``/opt``, conda's)."""
_PY_LIB = re.compile(r"/lib/python3[^/]*(/|$)")
"""An interpreter's library folder (``<prefix>/lib/python3.X``: its standard library)."""
_IN_PY_LIB = re.compile(r"/lib/python3[^/]*/[^/]")
_SITE_DIR = re.compile(r"/(site|dist)-packages$")


def python_folder(path: str) -> bool:
    """True when ``path`` is in a folder Python imports from, wherever its prefix: a
    ``site-packages``/``dist-packages`` folder, or an interpreter's ``lib/python3*``."""
    return bool(_SITE.search(path) or _PY_LIB.search(path))


def _stdlib(path: str) -> bool:
    """In an interpreter's ``lib/python3*`` folder, outside its package folders (whose modules
    the standard library's come before on ``sys.path``)."""
    return bool(_IN_PY_LIB.search(path)) and not _SITE.search(path)


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _env_dirs(env: list[str], name: str) -> tuple[str, ...]:
    for item in env:
        key, _, value = item.partition("=")
        if key == name:
            return tuple(posixpath.normpath(d) for d in value.split(":") if d.startswith("/"))
    return ()


@dataclass(frozen=True)
class ToolchainRules:
    """Which of an agent's changes a verifier may see (see the module docstring).

    Attributes:
        workdir: the task's working folder: only start-up hooks are kept out of it.
        code_roots: the system code roots plus the image's PATH/PYTHONPATH/LD_LIBRARY_PATH folders.
        path_dirs: the folders searched for commands, in order.
        library_dirs: the image's LD_LIBRARY_PATH folders (searched before the loader's cache).
    """

    workdir: str
    code_roots: tuple[str, ...] = CODE_ROOTS
    path_dirs: tuple[str, ...] = PATH_DIRS
    library_dirs: tuple[str, ...] = field(default=())

    @classmethod
    def for_image(cls, env: list[str], workdir: str) -> ToolchainRules:
        """The rules for a container whose configured environment is ``env`` (``KEY=value``)."""
        workdir = posixpath.normpath(workdir)
        def own(dirs: tuple[str, ...]) -> tuple[str, ...]:  # the workdir is the agent's, whatever the image says
            return tuple(d for d in dirs if not _under(d, (workdir,)))
        path_dirs = own(_env_dirs(env, "PATH")) or PATH_DIRS
        library_dirs = own(_env_dirs(env, "LD_LIBRARY_PATH"))
        roots = (*CODE_ROOTS, *path_dirs, *own(_env_dirs(env, "PYTHONPATH")), *library_dirs)
        return cls(workdir, tuple(dict.fromkeys(roots)), path_dirs, library_dirs)

    def reason(self, entry: LayerEntry) -> str | None:
        """Why ``entry`` must not reach the verifier, or None (the content checks of ``.pth`` files
        and the shadowing check are :func:`pth_imports` and :meth:`shadow_patterns`)."""
        path, name = entry.path, posixpath.basename(entry.path)
        if _under(path, (self.workdir,)):
            return None
        if _HOOK.match(name):
            return "a Python start-up hook"
        if posixpath.dirname(path) == "/" and not entry.is_dir and name in ROOT_CONFIG:
            return "pytest's configuration at the filesystem root (pytest reads it above /tests)"
        if _CONFIG.match(path):
            return "configuration of the verifier's tools"
        if (dot := _HOME_DOT.match(path)) and (dot.group(1) in HOME_STARTUP
                                               or (dot.group(1) == ".config" and dot.group(2) in HOME_CONFIG)):
            return "a start-up or configuration file of a home folder"
        if name.endswith(".pth") and not entry.is_dir:
            # even a path-only line appends a folder to sys.path, say one holding a sitecustomize.py
            return "a .pth file (Python's site module reads it at start-up)"
        if _under(path, self.code_roots):
            if entry.replaces_image_file:
                return "an image file in a system code folder"
        elif python_folder(path):
            if entry.replaces_image_file:
                return "an image file in a Python import folder"
        else:
            return None
        if name.endswith((".pyc", ".pyo")):
            return "compiled Python"
        if _stdlib(path):
            return "a module in a standard library folder"
        if _under(path, self.library_dirs):
            return "a library on LD_LIBRARY_PATH"
        return None

    def shadow_patterns(self, entry: LayerEntry) -> list[str]:
        """Shell globs naming what a new ``entry`` would shadow, if the image has any: the same
        command in a PATH folder, the same top-level module in a Python folder. Empty for others."""
        parent, name = posixpath.split(entry.path)
        if entry.in_image or entry.deleted:
            return []
        if parent in self.path_dirs:
            return [f"{d}/{name}" for d in self.path_dirs]
        if _SITE_DIR.search(parent) and not name.endswith((".dist-info", ".egg-info", ".pth", ".egg-link")):
            module = name.split(".")[0]  # its own folder too: an extension module comes before a .py
            return [f"{g}/{module}{suffix}" for g in dict.fromkeys((parent, *PY_DIR_GLOBS))
                    for suffix in ("", ".py", ".*.so", ".so")]
        return []


def runs_at_start(entry: LayerEntry) -> str | None:
    """Why the content of ``entry`` would run inside the verifier's tools: a ``.pth`` file with
    a line Python's ``site`` executes (``import``), or a distribution's ``entry_points.txt``
    registering a pytest plugin (``pytest11``, loaded by every pytest that sees it)."""
    if entry.path.endswith(".pth") and pth_imports(entry):
        return "a .pth with an import line"
    if posixpath.basename(entry.path) == "entry_points.txt" and _reads(entry, b"pytest11"):
        return "a pytest plugin's entry point"
    return None


def _reads(entry: LayerEntry, needle: bytes) -> bool:
    if entry.deleted:
        return False
    try:
        with open(entry.host_path, "rb") as handle:
            return needle in handle.read(1 << 20)
    except OSError:
        return True  # unreadable here: not carried


def pth_imports(entry: LayerEntry) -> bool:
    """True when ``entry`` is a ``.pth`` file with a line Python's ``site`` executes (``import``)."""
    if entry.deleted or not entry.path.endswith(".pth"):
        return False
    try:
        with open(entry.host_path, "rb") as handle:
            lines = handle.read(1 << 20).splitlines()
    except OSError:
        return True  # unreadable here: not carried
    return any(line.startswith((b"import ", b"import\t")) for line in lines)


@dataclass
class Sorting:
    """An agent's changes, sorted for the verifier.

    Attributes:
        carried: entries to replay in a fresh verifier (deletions included).
        dropped: path -> why it is kept from the verifier.
        shadow: entry path -> the globs it would shadow (to check in the image).
    """

    carried: list[LayerEntry] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    shadow: dict[str, list[str]] = field(default_factory=dict)


def sort_changes(layer: Layer, rules: ToolchainRules, ignored: tuple[str, ...]) -> Sorting:
    """Sorts every change of ``layer`` outside the ``ignored`` folders (its mounts). A dropped
    folder's descendants are dropped with it."""
    sorting = Sorting()
    dropped_dirs: list[str] = []
    for entry in layer.entries():
        if _under(entry.path, ignored):
            continue
        if _under(entry.path, tuple(dropped_dirs)):
            sorting.dropped[entry.path] = "inside a dropped folder"
            continue
        why = rules.reason(entry) or runs_at_start(entry)
        if why:
            sorting.dropped[entry.path] = why
            dropped_dirs.append(entry.path)
            continue
        patterns = rules.shadow_patterns(entry)
        if patterns:
            sorting.shadow[entry.path] = patterns
        sorting.carried.append(entry)
    return sorting


SHADOW_SCRIPT = r"""shopt -s nullglob
i=0
for pattern in "$@"; do
  if [ "$pattern" = "--" ]; then i=$((i+1)); continue; fi
  for hit in $pattern; do [ -e "$hit" ] || [ -L "$hit" ] && echo "$i"; break; done
done
"""
"""Prints the index of each group of globs (groups separated by ``--``) of which one matches."""


def replay_archive(entries: list[LayerEntry]) -> tempfile.SpooledTemporaryFile[bytes]:
    """A tar of the carried entries' current content (symlinks as links, never followed; sockets
    and devices left out), read from the host's copy of the upper layer."""
    spool: tempfile.SpooledTemporaryFile[bytes] = tempfile.SpooledTemporaryFile(max_size=16 << 20)
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            if entry.deleted:
                continue
            info = tar.gettarinfo(entry.host_path, arcname=entry.path.lstrip("/"))
            if info is None or not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
                continue
            if info.isreg():
                with open(entry.host_path, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    spool.seek(0)
    return spool


def put_archive(container: Container, archive: tempfile.SpooledTemporaryFile[bytes]) -> None:
    """Extracts ``archive`` at ``/`` of ``container`` through Docker's copy API.

    Raises:
        SandboxError: Docker refused it.
    """
    if not container.put_archive("/", archive):
        raise SandboxError(f"Docker refused to copy the agent's changes into sandbox {container.short_id}")


def sort_container(container: Container, layer: Layer, workdir: str) -> Sorting:
    """:func:`sort_changes` of ``container`` (attributes reloaded) under the rules of its image's
    environment, its mounts (the workdir, ``/tmp``, the output folder) aside: they are copied whole."""
    rules = ToolchainRules.for_image((container.attrs.get("Config") or {}).get("Env") or [], workdir)
    return sort_changes(layer, rules, mount_points(container))


def mount_points(container: Container) -> tuple[str, ...]:
    """Where ``container`` has volumes (the sandbox's tmpfs folders)."""
    return tuple(m.get("Destination", "") for m in container.attrs.get("Mounts") or [] if m.get("Destination"))


async def carry_changes(fresh: Sandbox, target: Container, source: Container, sorting: Sorting,
                        run_blocking: Callable[..., Awaitable[Any]]) -> None:
    """Replays ``sorting.carried`` from ``source`` (stopped processes) into the fresh sandbox
    ``fresh`` (container ``target``), after dropping what shadows the image; then copies the
    source's mounted folders whole. Commands run only in ``fresh``, whose tools are the image's.

    Raises:
        SandboxError: Docker failed, or a command of the fresh sandbox did.
    """
    if sorting.shadow:
        await _drop_shadowing(fresh, sorting)
    doomed = [e.path for e in sorting.carried if e.deleted or e.opaque]
    for start in range(0, len(doomed), 500):
        result = await fresh.exec("rm -rf -- " + " ".join(shlex.quote(p) for p in doomed[start:start + 500]), timeout_s=120)
        if not result.ok:
            raise SandboxError(f"could not replay the agent's deletions in the verifier's sandbox: {result.stderr[-300:]}")
    archive = await run_blocking(replay_archive, sorting.carried)
    try:
        await run_blocking(put_archive, target, archive)
    finally:
        archive.close()
    for folder in mount_points(source):
        if folder != EXEC_ROOT:
            await run_blocking(copy_folder, source, target, folder)


async def _drop_shadowing(fresh: Sandbox, sorting: Sorting) -> None:
    paths = list(sorting.shadow)
    args: list[str] = []
    for path in paths:
        args += [*sorting.shadow[path], "--"]
    result = await fresh.exec(f"bash -c {shlex.quote(SHADOW_SCRIPT)} shadow " + " ".join(map(shlex.quote, args)), timeout_s=60)
    if not result.ok:
        raise SandboxError(f"could not look for shadowed tools in the verifier's sandbox: {result.stderr[-300:]}")
    hits = {paths[int(i)] for i in result.stdout.split() if i.isdigit() and int(i) < len(paths)}
    for path in hits:
        sorting.dropped[path] = "shadows a command or module of the image"
    sorting.carried = [e for e in sorting.carried if not _under(e.path, tuple(hits))]
