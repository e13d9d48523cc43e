"""Reward hacks on the terminal grader, on the real backends: none earns the reward.

The task's hidden test always fails (after 2 s, long enough for any live attacker to act), so a
reward of 1 can only come from a forged result file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.envs.sandbox.base import SandboxBackend
from gymfleet.envs.terminal import TerminalEnv
from tests.envs.terminal.conftest import write_task
from tests.envs.terminal.test_env import bash, play

FAILING_CHECKS = """\
import os, sys, time, unittest
sys.path.insert(0, os.environ["GYMFLEET_TEST_DIR"])
import gymfleet_testlib

class Checks(unittest.TestCase):
    def test_never(self):
        time.sleep(2)
        self.fail("this task cannot be solved")

if __name__ == "__main__":
    gymfleet_testlib.main()
"""

FORGED = '{"nonce": "%s", "tests": [{"name": "t", "status": "passed"}]}'

# A daemon that waits for the tests, takes their nonce and result path from /proc (environment
# variables, or the nonce file they name), writes a passing result and kills the tests.
REWRITER = r"""
cat > /tmp/rewrite.sh <<'SH'
while :; do
  for e in /proc/[0-9]*/environ; do
    env=$(tr '\0' '\n' < "$e" 2>/dev/null) || continue
    file=$(printf '%s\n' "$env" | sed -n 's/^GYMFLEET_RESULT_FILE=//p')
    [ -n "$file" ] || continue
    nonce=$(printf '%s\n' "$env" | sed -n 's/^GYMFLEET_NONCE=//p')
    nf=$(printf '%s\n' "$env" | sed -n 's/^GYMFLEET_NONCE_FILE=//p')
    [ -n "$nonce" ] || nonce=$(cat "$nf" 2>/dev/null)
    [ -n "$nonce" ] || continue
    printf 'FORGED' "$nonce" > "$file"
    pid=${e#/proc/}; kill -9 "${pid%/environ}"
  done
  sleep 0.05
done
SH
nohup setsid bash /tmp/rewrite.sh >/dev/null 2>&1 &
sleep 0.2; echo started
""".replace("FORGED", FORGED)

# Docker only (the local backend binds the host's tools read-only): the tools the tests run,
# replaced as root. Each forges a passing result when it finds the grader's variables.
FORGE = r"""
cat > /tmp/forge.sh <<'SH'
n=${GYMFLEET_NONCE:-$(cat "$GYMFLEET_NONCE_FILE" 2>/dev/null)}
printf 'FORGED' "$n" > "$GYMFLEET_RESULT_FILE"
SH
""".replace("FORGED", FORGED)
TOOL_HACKS = {
    "python3": FORGE + (
        "printf '#!/bin/bash\\n. /tmp/forge.sh\\n' > /tmp/fake && chmod +x /tmp/fake\n"
        "for p in /usr/local/bin/python3 /usr/bin/python3; do cp /tmp/fake $p; done; echo replaced"),
    "bash": FORGE + r"""
cp /usr/bin/bash /usr/bin/realbash
cat > /usr/bin/bash.new <<'SH'
#!/usr/bin/realbash
case "$*" in */run.sh) . /tmp/forge.sh; exit 0;; esac
exec /usr/bin/realbash "$@"
SH
chmod +x /usr/bin/bash.new && mv /usr/bin/bash.new /usr/bin/bash; echo replaced
""",
    "pth": (
        "d=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'); mkdir -p \"$d\"\n"
        "cat > \"$d/zz_forge.pth\" <<'PY'\n"
        "import os, sys; f = os.environ.get('GYMFLEET_RESULT_FILE'); nf = os.environ.get('GYMFLEET_NONCE_FILE'); "
        "n = os.environ.get('GYMFLEET_NONCE') or (open(nf).read() if nf and os.path.exists(nf) else ''); "
        f"f and (open(f, 'w').write('{FORGED}' % n.strip()), os._exit(0))\n"
        "PY\necho replaced"),
}


@pytest.fixture
def tasks_dir(tmp_path: Path) -> Path:
    write_task(tmp_path, "never", checks=FAILING_CHECKS,
               yaml="instruction: x\nmax_agent_turns: 5\ntest_timeout_s: 60\n")
    return tmp_path


@pytest.fixture(params=[pytest.param("local", marks=pytest.mark.bwrap),
                        pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> SandboxBackend:
    return request.getfixturevalue(f"{request.param}_backend")


async def test_a_daemon_rewriting_the_result_earns_nothing(backend: SandboxBackend, tasks_dir: Path) -> None:
    env = TerminalEnv(sandbox=backend, tasks_dir=tasks_dir)
    steps = await play(env, [bash(REWRITER), "submit"], instance_id="never")
    assert "started" in steps[0][0]
    grading = steps[-1][4]["grading"]
    assert steps[-1][1] == 0.0, grading
    assert grading["tests"] == {"Checks.test_never": "failed"}, grading
    await env.close_async()


@pytest.mark.docker
@pytest.mark.parametrize("hack", sorted(TOOL_HACKS))
async def test_replaced_tools_earn_nothing(docker_backend: SandboxBackend, tasks_dir: Path, hack: str) -> None:
    env = TerminalEnv(sandbox=docker_backend, tasks_dir=tasks_dir)
    steps = await play(env, [bash(TOOL_HACKS[hack]), "submit"], instance_id="never")
    assert "replaced" in steps[0][0], steps[0][0]
    grading = steps[-1][4]["grading"]
    assert steps[-1][1] == 0.0, grading
    assert grading["tests"] == {"Checks.test_never": "failed"}, grading
    await env.close_async()


async def test_live_processes_are_listed_for_the_tests(backend: SandboxBackend, tmp_path: Path) -> None:
    checks = FAILING_CHECKS.replace(
        "        time.sleep(2)\n        self.fail(\"this task cannot be solved\")",
        "        listed = gymfleet_testlib.processes()\n"
        "        self.assertTrue([c for c in listed if 'sleep 4242' in c], listed)")
    write_task(tmp_path, "listed", checks=checks)
    env = TerminalEnv(sandbox=backend, tasks_dir=tmp_path)
    steps = await play(env, [bash("nohup sleep 4242 >/dev/null 2>&1 &"), "submit"], instance_id="listed")
    assert steps[-1][1] == 1.0, steps[-1][4]["grading"]
    await env.close_async()


PEEKING_CHECKS = """\
import os, subprocess, sys, unittest
sys.path.insert(0, os.environ["GYMFLEET_TEST_DIR"])
import gymfleet_testlib

class Checks(unittest.TestCase):
    def test_a_program_the_tests_run_cannot_peek(self):
        for what in ("environ", "mem"):
            peek = subprocess.run(["cat", "/proc/%d/%s" % (os.getpid(), what)], capture_output=True)
            self.assertNotEqual(peek.returncode, 0, what)
        self.assertFalse(os.path.exists(os.environ.get("GYMFLEET_NONCE_FILE", "/nonexistent")))
        self.assertNotIn("GYMFLEET_NONCE", os.environ)

if __name__ == "__main__":
    gymfleet_testlib.main()
"""


async def test_programs_the_tests_run_find_no_nonce(backend: SandboxBackend, tmp_path: Path) -> None:
    """What the tests start (the agent's script, a git hook in its repository) runs as their
    user: the nonce is in no file, no environment, and no readable memory of the tests."""
    write_task(tmp_path, "peek", checks=PEEKING_CHECKS)
    env = TerminalEnv(sandbox=backend, tasks_dir=tmp_path)
    steps = await play(env, ["submit"], instance_id="peek")
    assert steps[-1][1] == 1.0, steps[-1][4]["grading"]
    await env.close_async()
