"""The bash testlib (``gymfleet_testlib.sh``): checks as bash functions, graded by the real grader
(the easy tier's hidden tests use it instead of starting Python)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.envs.sandbox.base import SandboxBackend, SandboxSpec
from gymfleet.envs.sandbox.local import LocalBackend
from gymfleet.envs.terminal.grader import grade
from gymfleet.envs.terminal.task import load_task
from tests.envs.terminal.conftest import write_task
from tests.envs.terminal.fake_sandbox import FakeBackend

RUN_SH = r"""#!/bin/bash
. "$GYMFLEET_TEST_DIR/gymfleet_testlib.sh"
test_text() { gf_equal done.txt $'yes\n'; }
test_stripped() { gf_equal_stripped done.txt yes; }
test_missing() { gf_equal absent.txt x; }
test_quoted() { __gf_why=$'a "quoted"\\ message\non two lines'; return 1; }
test_nonce_gone() { [ ! -e "$GYMFLEET_TEST_DIR/nonce" ] && [ -z "${GYMFLEET_NONCE_FILE+set}" ]; }
test_cd_stays_in_its_check() { cd /; }
test_after_cd() { gf_equal done.txt $'yes\n'; }
gf_main test_text test_stripped test_missing test_quoted test_nonce_gone test_cd_stays_in_its_check test_after_cd
"""


async def _graded(backend: SandboxBackend, tmp_path: Path, run_sh: str) -> dict:
    write_task(tmp_path, "t", run_sh=run_sh)
    async with backend.create(SandboxSpec()) as sb:
        await sb.put_file("done.txt", b"yes\n")
        return (await grade(sb, load_task(tmp_path / "t"), ".gymfleet" if not sb.isolated else "/tmp/.gymfleet")).as_info()


def _check(info: dict) -> None:
    assert info["error"] is None and info["reward"] == 0.0, info
    assert info["tests"] == {"test_text": "passed", "test_stripped": "passed", "test_missing": "failed",
                             "test_quoted": "failed", "test_nonce_gone": "passed",
                             "test_cd_stays_in_its_check": "passed", "test_after_cd": "passed"}
    assert info["failures"]["test_missing"] == "absent.txt does not hold the expected text"
    assert info["failures"]["test_quoted"] == 'a "quoted"\\ message\non two lines'


async def test_bash_checks_are_graded_with_their_messages(tmp_path: Path) -> None:
    _check(await _graded(FakeBackend(), tmp_path, RUN_SH))


async def test_all_bash_checks_passing_is_reward_1(tmp_path: Path) -> None:
    run_sh = '. "$GYMFLEET_TEST_DIR/gymfleet_testlib.sh"\nt() { gf_equal done.txt $\'yes\\n\'; }\ngf_main t\n'
    info = await _graded(FakeBackend(), tmp_path, run_sh)
    assert info["reward"] == 1.0 and info["tests"] == {"t": "passed"}


async def test_a_result_without_the_nonce_is_refused(tmp_path: Path) -> None:
    """A run.sh that skips the lib's nonce (e.g. the file was gone) writes an empty nonce: 0."""
    run_sh = ('rm -f "$GYMFLEET_NONCE_FILE"\n. "$GYMFLEET_TEST_DIR/gymfleet_testlib.sh"\n'
              't() { true; }\ngf_main t\n')
    info = await _graded(FakeBackend(), tmp_path, run_sh)
    assert info["reward"] == 0.0 and "nonce" in info["error"]


@pytest.mark.bwrap
async def test_bash_checks_on_bubblewrap(local_backend: LocalBackend, tmp_path: Path) -> None:
    _check(await _graded(local_backend, tmp_path, RUN_SH))
