"""The grader's guard: what the eval's install must not change, taken before any code of the
prediction runs and checked after the install, through Docker's file API (not the sandbox's own
tools, which the install may have replaced).

The eval script re-runs the spec's install (``pip install -e .``) on the patched tree, so code of
the prediction runs as root before the grader's own ``git checkout``/``git apply`` of the test
patch and before the test command: it could replace ``/usr/bin/git`` with a wrapper that makes
the test patch a no-op, put a ``git`` or ``bash`` earlier on ``PATH``, write
``/etc/ld.so.preload``, or rewrite the test files afterwards. Before the install (only the patch
was applied: git ran, nothing of the prediction did) the guard

* records the bytes of the grader's tools (:data:`TOOLS` in every ``PATH`` folder, absent ones
  as absent, plus :data:`SYSTEM_FILES`), read with :meth:`Sandbox.get_file`;
* applies the test patch to copies of its files in a scratch folder (``git cat-file --filters`` of the
  base commit, as ``git checkout`` writes them; ``git apply`` outside the repository) and records what they must hold.

After the install and the eval script's own reset and test-patch apply, each is read again; any
difference makes the run ungradable (unresolved, ``ungradable`` names the first paths).
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import shlex
from dataclasses import dataclass

from gymfleet.envs.errors import SandboxError
from gymfleet.envs.sandbox import Sandbox
from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.instances import SWEInstance

TOOLS = ("git", "patch", "bash", "sh", "dash", "env", "cat", "rm", "stat", "touch", "find")
"""The commands the grader runs after the install (the eval script's git, the test command's
shell, the canary's file handling)."""
SYSTEM_FILES = ("/etc/ld.so.preload", "/usr/lib/git-core/git", "/usr/lib/git-core/git-apply")
"""Files outside ``PATH`` that change what every tool does (the loader's preload list) or that
git runs."""
_DELIMITER = "GYMFLEET_TEST_PATCH_EOF"


@dataclass(frozen=True)
class GuardSnapshot:
    """What the install must not change.

    Attributes:
        tools: path -> sha256 of the file, or ``""`` when absent or not a regular file.
        test_files: repository path -> the bytes the test patch leaves (None: it deletes it).
    """

    tools: dict[str, str]
    test_files: dict[str, bytes | None]


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


async def take_snapshot(sandbox: Sandbox, instance: SWEInstance, repo_dir: str) -> GuardSnapshot:
    """Records the grader's tools and what the test patch makes of its files (none when git
    cannot apply it to copies of them). Call after the model patch was applied and before
    anything of it ran (the eval script's install).

    Raises:
        SandboxError: the sandbox failed.
    """
    path_run = await sandbox.exec('printf %s "$PATH"', timeout_s=60)
    folders = [f for f in dict.fromkeys(path_run.stdout.split(":")) if f.startswith("/")]
    tool_paths = [f"{folder.rstrip('/')}/{tool}" for folder in folders for tool in TOOLS]
    tool_paths += list(SYSTEM_FILES)
    digests = await asyncio.gather(*(_digest(sandbox, p) for p in tool_paths))
    scratch = f"/tmp/gymfleet-guard-{secrets.token_hex(8)}"
    files = [*upstream.modified_files(instance.test_patch), *upstream.new_files(instance.test_patch)]
    shows = [f"mkdir -p {shlex.quote(scratch + '/' + p.rpartition('/')[0])} && "
             f"git -C {repo_dir} cat-file --filters {instance.base_commit}:{shlex.quote(p)} > "
             f"{shlex.quote(scratch + '/' + p)}"
             for p in upstream.modified_files(instance.test_patch)]
    script = "\n".join(["set -e", f"mkdir -p {scratch}", *shows, f"cd {scratch}",
                        f"git apply - <<'{_DELIMITER}'\n{instance.test_patch}\n{_DELIMITER}"])
    run = await sandbox.exec(script + "\n", timeout_s=120)
    # a test patch git cannot apply to loose copies (a rename, a binary delta) leaves the test
    # files unchecked; the eval script's own apply then decides, as before
    contents = (await asyncio.gather(*(_read(sandbox, f"{scratch}/{p}") for p in files))
                if run.ok else [])
    await sandbox.exec(f"rm -rf {scratch}", timeout_s=60)
    return GuardSnapshot(dict(zip(tool_paths, digests)), dict(zip(files, contents)))


async def changed_since(sandbox: Sandbox, snapshot: GuardSnapshot, repo_dir: str) -> list[str]:
    """The grader's tools and test files that differ from ``snapshot`` (empty when none):
    ``/usr/bin/git`` for a tool, ``tests/test_x.py`` for a test file."""
    tools = list(snapshot.tools)
    digests = await asyncio.gather(*(_digest(sandbox, p) for p in tools))
    changed = [p for p, d in zip(tools, digests) if d != snapshot.tools[p]]
    files = list(snapshot.test_files)
    contents = await asyncio.gather(*(_read(sandbox, f"{repo_dir}/{p}") for p in files))
    return changed + [p for p, c in zip(files, contents) if c != snapshot.test_files[p]]
