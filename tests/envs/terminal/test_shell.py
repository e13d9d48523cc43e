"""The persistent shell passes the agent's script to bash exactly (quotes, backslashes, here-docs,
non-ASCII), as one ``eval`` word with no helper process."""

from __future__ import annotations

import pytest

from gymfleet.envs.sandbox.base import SandboxBackend, SandboxSpec
from gymfleet.envs.sandbox.local import LocalBackend
from gymfleet.envs.terminal.shell import PersistentShell, scratch_dir
from tests.envs.terminal.fake_sandbox import FakeBackend

SCRIPT = """\
printf '%s|' 'single' "double \\"q\\"" $'ansi\\tc' back\\\\slash 'it'"'"'s' "$((6 * 7))" ünï
cat <<'EOF2'
$HOME `not run` \\n
EOF2
f() { echo "fn $1"; }; export V='a b'; mkdir -p sub && cd sub
"""


async def _check(backend: SandboxBackend) -> None:
    async with backend.create(SandboxSpec()) as sb:
        shell = PersistentShell(sb, scratch_dir(sb))
        first = await shell.run(SCRIPT, timeout_s=30)
        second = await shell.run('f "$V"; basename "$PWD"', timeout_s=30)
    assert first.ok, first.stderr
    assert first.stdout == "single|double \"q\"|ansi\tc|back\\slash|it's|42|ünï|$HOME `not run` \\n\n"
    assert second.stdout == "fn a b\nsub\n", second
    assert "base64" not in shell.wrap(SCRIPT)


async def test_scripts_reach_bash_exactly(tmp_path: object) -> None:
    await _check(FakeBackend())


@pytest.mark.bwrap
async def test_scripts_reach_bash_exactly_on_bubblewrap(local_backend: LocalBackend) -> None:
    await _check(local_backend)
