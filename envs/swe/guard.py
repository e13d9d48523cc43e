"""The grader's guard: what the eval's install must not change, taken before any code of the
prediction runs and checked after the install, through Docker's file API (not the sandbox's own
tools, which the install may have replaced).

The eval script re-runs the spec's install (``pip install -e .``) on the patched tree, so code of
the prediction runs as root before the grader's own ``git checkout``/``git apply`` of the test
patch and before the test command: it could replace ``/usr/bin/git`` with a wrapper that makes
the test patch a no-op, put a ``git`` or ``bash`` earlier on ``PATH``, write
``/etc/ld.so.preload``, or rewrite the test files afterwards. Before the install (only the patch
was applied: git ran, nothing of the prediction did) the guard

* lists which of the grader's tools exist (:data:`TOOLS` in every ``PATH`` folder, plus
  :data:`SYSTEM_FILES`) and records the bytes of each, read with :meth:`Sandbox.get_file`;
* applies the test patch to copies of its files in a scratch folder (``git cat-file --filters`` of the
  base commit, as ``git checkout`` writes them; ``git apply`` outside the repository) and records what they must hold.

After the install and the eval script's own reset and test-patch apply, the shell is read again
first (every ``bash`` up to the first on ``PATH``, and the preload list); once it is the same, one
listing of ``[ -e ]`` builtins says which candidates exist, and each present one is read again.
Any difference makes the run ungradable (unresolved, ``ungradable`` names the first paths). Most
candidates are absent: they cost one listing, not one Docker call each.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import shlex
from dataclasses import dataclass

from gymfleet.core.errors import SandboxError
from gymfleet.envs.sandbox import Sandbox
from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.instances import SWEInstance

TOOLS = ("git", "patch", "bash", "sh", "dash", "env", "cat", "rm", "stat", "touch", "find")
"""The commands the grader runs after the install (the eval script's git, the test command's
shell, the canary's file handling)."""
SYSTEM_FILES = ("/etc/ld.so.preload",)
"""Files outside ``PATH`` that change what every tool does (the loader's preload list)."""
_DELIMITER = "GYMFLEET_TEST_PATCH_EOF"


@dataclass(frozen=True)
class GuardSnapshot:
    """What the install must not change.

    Attributes:
        tools: path -> sha256 of the first existing path of each tool in ``PATH`` order (the one
            a command runs; ``""`` when it is not a regular file, e.g. a link).
        candidates: every tool path looked at (:data:`TOOLS` in each ``PATH`` folder, and
            :data:`SYSTEM_FILES`), in ``PATH`` order.
        test_files: repository path -> the bytes the test patch leaves (None: it deletes it).
    """

    tools: dict[str, str]
    candidates: tuple[str, ...]
    test_files: dict[str, bytes | None]
    scratch: str = ""
    """The scratch folder of the test patch's copies (removed by :func:`changed_since`)."""
    present: frozenset[str] = frozenset()
    """The candidates that existed (``tools`` holds the first of each name: the one run)."""


async def _digest(sandbox: Sandbox, path: str) -> str:
    try:
        return hashlib.sha256(await sandbox.get_file(path)).hexdigest()
    except SandboxError:
        return ""


async def _read(sandbox: Sandbox, path: str) -> bytes | None:
    try:
        return await sandbox.get_file(path)
    except SandboxError:
        return None


def _listing(tools: tuple[str, ...], extra: tuple[str, ...]) -> str:
    """Shell (builtins only) printing ``C <path>`` for every candidate (each tool in each ``PATH``
    folder, then ``extra``) and ``E <path>`` for each that exists."""
    names = " ".join(shlex.quote(t) for t in tools)
    fixed = " ".join(shlex.quote(p) for p in extra)
    return ("IFS=:; set -f; for d in $PATH; do case $d in /*) ;; *) continue;; esac; "
            f"for t in {names}; do p=${{d%/}}/$t; echo \"C $p\"; "
            "{ [ -e \"$p\" ] || [ -L \"$p\" ]; } && echo \"E $p\"; done; done; unset IFS; "
            f"for p in {fixed}; do echo \"C $p\"; {{ [ -e \"$p\" ] || [ -L \"$p\" ]; }} && "
            "echo \"E $p\"; done; true\n")


def _parse_listing(stdout: str) -> tuple[tuple[str, ...], set[str]]:
    lines = stdout.split("\n")
    candidates = tuple(dict.fromkeys(line[2:] for line in lines if line.startswith("C ")))
    return candidates, {line[2:] for line in lines if line.startswith("E ")}


async def take_snapshot(sandbox: Sandbox, instance: SWEInstance, repo_dir: str) -> GuardSnapshot:
    """Records the grader's tools and what the test patch makes of its files (none when git
    cannot apply it to copies of them). Call after the model patch was applied and before
    anything of it ran (the eval script's install): the sandbox's own shell is still trusted.

    Raises:
        SandboxError: the sandbox failed.
    """
    scratch = f"/tmp/gymfleet-guard-{secrets.token_hex(8)}"
    files = [*upstream.modified_files(instance.test_patch), *upstream.new_files(instance.test_patch)]
    shows = [f"mkdir -p {shlex.quote(scratch + '/' + p.rpartition('/')[0])} && "
             f"git -C {repo_dir} cat-file --filters {instance.base_commit}:{shlex.quote(p)} > "
             f"{shlex.quote(scratch + '/' + p)}"
             for p in upstream.modified_files(instance.test_patch)]
    apply = "\n".join(["set -e", f"mkdir -p {scratch}", *shows, f"cd {scratch}",
                       f"git apply - <<'{_DELIMITER}'\n{instance.test_patch}\n{_DELIMITER}"])
    # one exec: the listing, then the test patch on copies (a subshell: its failure is its own)
    run = await sandbox.exec(_listing(TOOLS, SYSTEM_FILES) + f"( {apply}\n) >/dev/null 2>&1 && "
                             "echo 'S ok'\ntrue\n", timeout_s=120)
    candidates, present = _parse_listing(run.stdout)
    applied = "S ok" in run.stdout.split("\n")
    # the first present path of each tool is the one PATH runs; a later one never runs, and a
    # new earlier one shows in the listing
    first: dict[str, str] = {}
    for path in candidates:
        if path in present:
            first.setdefault(path.rsplit("/", 1)[-1], path)
    ordered = sorted(first.values())
    # a test patch git cannot apply to loose copies (a rename, a binary delta) leaves the test
    # files unchecked; the eval script's own apply then decides, as before
    digests, contents = await asyncio.gather(
        asyncio.gather(*(_digest(sandbox, p) for p in ordered)),
        asyncio.gather(*(_read(sandbox, f"{scratch}/{p}") for p in (files if applied else []))))
    return GuardSnapshot(dict(zip(ordered, digests)), candidates, dict(zip(files, contents)),
                         scratch, frozenset(present))


async def changed_since(sandbox: Sandbox, snapshot: GuardSnapshot, repo_dir: str) -> list[str]:
    """The grader's tools and test files that differ from ``snapshot`` (empty when none):
    ``/usr/bin/git`` for a tool, ``tests/test_x.py`` for a test file.

    The shell is checked first through Docker's file API (every ``bash`` candidate up to the
    first present one, and the loader's preload list); only then does one of its builtin-only
    listings say which other candidates exist, and each present one is read again."""
    shells = [p for p in snapshot.candidates if p.endswith("/bash")]
    first = next((i for i, p in enumerate(shells) if p in snapshot.tools), len(shells))
    trust = [*shells[:first + 1], "/etc/ld.so.preload"]
    trusted = await asyncio.gather(*(_digest(sandbox, p) for p in trust))
    changed = [p for p, d in zip(trust, trusted) if d != snapshot.tools.get(p, "")]
    if changed:
        return changed
    run = await sandbox.exec(f"rm -rf {shlex.quote(snapshot.scratch)}\n"
                             + _listing(TOOLS, SYSTEM_FILES), timeout_s=60)
    candidates, now = _parse_listing(run.stdout)
    if not run.ok or candidates != snapshot.candidates:
        return ["the sandbox's shell or PATH (listing the grader's tools gave another list)"]
    changed = sorted(now.symmetric_difference(snapshot.present))
    present = [p for p in snapshot.tools if p in now]
    digests = await asyncio.gather(*(_digest(sandbox, p) for p in present))
    changed += [p for p, d in zip(present, digests) if d != snapshot.tools[p]]
    files = list(snapshot.test_files)
    contents = await asyncio.gather(*(_read(sandbox, f"{repo_dir}/{p}") for p in files))
    return changed + [p for p, c in zip(files, contents) if c != snapshot.test_files[p]]
