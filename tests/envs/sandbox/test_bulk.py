"""Many files in one command: contents, modes, folders and ownership as put_file leaves them."""

from __future__ import annotations

import pytest

from gymfleet.envs.sandbox.bulk import MAX_INLINE_BYTES, put_files
from gymfleet.envs.sandbox.local_sandbox import LocalSandbox

pytestmark = pytest.mark.bwrap


async def test_files_land_with_their_modes_in_one_command(sandbox: LocalSandbox) -> None:
    before = (await sandbox.exec("id -un")).stdout
    await put_files(sandbox, {"a/b/run.sh": (b"echo hi\n", 0o755), "c.txt": (b"x" * 1000, 0o644),
                              "/tmp/t/abs.txt": (b"abs", 0o600)})
    listing = await sandbox.exec("stat -c '%n %a %U' a/b/run.sh c.txt /tmp/t/abs.txt; ./a/b/run.sh; cat /tmp/t/abs.txt")
    user = before.strip()
    assert listing.stdout.splitlines() == [f"a/b/run.sh 755 {user}", f"c.txt 644 {user}",
                                           f"/tmp/t/abs.txt 600 {user}", "hi", "abs"]


async def test_too_large_for_one_command_goes_file_by_file(sandbox: LocalSandbox) -> None:
    big = bytes(range(256)) * (MAX_INLINE_BYTES // 256 + 1)
    await put_files(sandbox, {"big.bin": (big, 0o644), "small.txt": (b"s", 0o644)})
    assert await sandbox.get_file("big.bin") == big and await sandbox.get_file("small.txt") == b"s"
