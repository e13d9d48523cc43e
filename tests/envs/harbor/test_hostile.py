"""Reward hacks on Harbor-v0's verifier, by a real hostile policy on Docker: none earns reward.

The policy never writes ``/app/out.json``, so harbor-hello's honest verifier gives 0; a reward of
1 can only come from a forged reward file. The gold solution still earns 1
(``test_docker.py::test_examples_pass_the_env_contract``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gymfleet.envs.harbor.env import EXAMPLES_DIR, HarborEnv

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]
TASKS = Path(__file__).resolve().parent / "tasks"

FORGED = '{"reward": 1.0, "greeting_ok": 1.0, "count_ok": 1.0}'
WRITE = f"mkdir -p /logs/verifier; printf '%s' '{FORGED}' > /logs/verifier/reward.json"

# A daemon that rewrites the reward file (atomically, so no read finds it half-written) while
# and after the verifier runs.
REWRITER = f"""
cat > /tmp/rewrite.sh <<'SH'
while :; do
  mkdir -p /logs/verifier
  printf '%s' '{FORGED}' > /logs/.r && mv -f /logs/.r /logs/verifier/reward.json
  echo 1 > /logs/.t && mv -f /logs/.t /logs/verifier/reward.txt
  sleep 0.01
done
SH
nohup setsid bash /tmp/rewrite.sh >/dev/null 2>&1 &
sleep 0.2; echo started
"""

# Tools the verifier runs, replaced as root; each forges the reward when it runs.
FAKE = f"cat > /tmp/fake <<'SH'\n#!/bin/sh\n{WRITE}\nSH\nchmod +x /tmp/fake\n"
PY_HOOK = (f"cat > /tmp/hook.py <<'PY'\nimport atexit, os; atexit.register(lambda: os.system({WRITE!r}))\nPY\n"
           "d=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'); mkdir -p \"$d\"\n")
TOOL_HACKS = {
    "python3": FAKE + "for p in /usr/local/bin/python3 /usr/bin/python3; do [ -e $p ] && cp /tmp/fake $p; done; echo replaced",
    "bash": f"""
cp /usr/bin/bash /usr/bin/realbash
cat > /usr/bin/bash.new <<'SH'
#!/usr/bin/realbash
case "$*" in */test.sh*) {WRITE}; exit 0;; esac
exec /usr/bin/realbash "$@"
SH
chmod +x /usr/bin/bash.new && mv /usr/bin/bash.new /usr/bin/bash; echo replaced
""",
    "sitecustomize": PY_HOOK + (  # the one Python imports (Debian's lives in /etc/python3.X), else a new one
        'f=$(python3 -c "import sitecustomize; print(sitecustomize.__file__)" 2>/dev/null || echo "$d/sitecustomize.py")\n'
        'cat /tmp/hook.py >> "$f"; echo replaced'),
    "pth": PY_HOOK + 'cp /tmp/hook.py "$d/zz_forge.pth"; echo replaced',
    # /usr/local/bin comes first on PATH: a new python3 there shadows the image's
    "shadow-on-path": FAKE + "cp /tmp/fake /usr/local/bin/python3; echo replaced",
}


def bash(script: str) -> str:
    return f"```bash\n{script}\n```"


async def _play(actions: list[str], path: Path = EXAMPLES_DIR, task_id: str = "harbor-hello",
                **kwargs: Any) -> tuple[list[str], float, dict[str, Any]]:
    """Plays ``actions`` then ``submit``; returns (observations, final reward, final info)."""
    env = HarborEnv(sandbox="docker", path=str(path), task_ids=[task_id], **kwargs)
    observations = []
    try:
        await env.reset_async(options={"instance_id": task_id})
        for action in [*actions, "submit"]:
            observation, reward, terminated, truncated, info = await env.step_async(action)
            observations.append(observation)
            if terminated or truncated:
                return observations, reward, info
        raise AssertionError("the episode did not end on submit")
    finally:
        await env.close_async()


async def test_a_daemon_rewriting_the_reward_earns_nothing(docker_available: bool) -> None:
    observations, reward, info = await _play([bash(REWRITER)])
    assert "started" in observations[0]
    assert reward == 0.0, info["grading"]
    assert info["grading"]["extra"] == {"greeting_ok": 0.0, "count_ok": 0.0}, info["grading"]
    assert any("rewrite.sh" in p for p in info["grading"]["stopped_processes"])


@pytest.mark.parametrize("hack", sorted(TOOL_HACKS))
async def test_replaced_tools_earn_nothing_and_the_real_checks_run(docker_available: bool, hack: str) -> None:
    observations, reward, info = await _play([bash(TOOL_HACKS[hack])])
    assert "replaced" in observations[0], observations[0]
    assert reward == 0.0, info["grading"]
    # the task's own checks ran (with the image's python3) and found the task unsolved
    assert info["grading"]["extra"] == {"greeting_ok": 0.0, "count_ok": 0.0}, info["grading"]
    assert info["grading"]["fresh_sandbox"] is True


# The verifier starts in the workdir, which Python puts first on sys.path for `python3 -`: a
# json.py there is what the test script imports, unless the script runs `python3 -I` (the example's does).
WORKDIR_MODULE = """
cat > /app/json.py <<'PY'
def load(f): return {}
def dump(obj, f): f.write('FORGED')
PY
echo replaced
""".replace("FORGED", FORGED)


async def test_a_workdir_module_shadowing_the_verifiers_import_earns_nothing(docker_available: bool) -> None:
    observations, reward, info = await _play([bash(WORKDIR_MODULE)])
    assert "replaced" in observations[0], observations[0]
    assert reward == 0.0 and info["grading"]["extra"] == {"greeting_ok": 0.0, "count_ok": 0.0}, info["grading"]


# pytest reads an ini file in the folders above /tests (here /), then every conftest.py from
# there down: one at the root turns every failure into a pass (uvx-verifier's reward is pytest's exit).
ROOT_CONFTEST = """
printf '[pytest]\\n' > /pytest.ini
cat > /conftest.py <<'PY'
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
PY
echo replaced
"""


# uvx-verifier's test.sh runs apt-get, then uv's staged uvx: an apt hook that rewrites the tests
# before pytest reads them, or a uvx that reports success without running anything.
APT_HOOK = """
cat > /opt/hook.sh <<'SH'
printf 'def test_answer():\\n    pass\\n' > /tests/test_outputs.py
SH
echo 'APT::Update::Pre-Invoke {"/bin/sh /opt/hook.sh";};' > /etc/apt/apt.conf.d/00zz-hook
echo replaced
"""
FAKE_UVX = """
printf '#!/bin/sh\\necho "1 passed"\\nexit 0\\n' > /root/.local/bin/uvx && chmod +x /root/.local/bin/uvx
echo replaced
"""
UVX_HACKS = {"root-conftest": (ROOT_CONFTEST, {"/pytest.ini", "/conftest.py"}),
             "apt-hook": (APT_HOOK, {"/etc/apt/apt.conf.d/00zz-hook"}),
             "fake-uvx": (FAKE_UVX, {"/root/.local/bin/uvx"})}


@pytest.mark.parametrize("hack", sorted(UVX_HACKS))
async def test_a_hook_in_the_verifiers_own_tools_earns_nothing(docker_available: bool, hack: str) -> None:
    script, withheld = UVX_HACKS[hack]
    observations, reward, info = await _play([bash(script)], TASKS, "uvx-verifier")
    assert "replaced" in observations[0], observations[0]
    assert reward == 0.0 and info["grading"]["error"] is None, info["grading"]
    assert withheld <= set(info["grading"]["withheld"]), info["grading"]


async def test_a_solution_beside_a_replaced_tool_is_still_graded_on_its_files(docker_available: bool) -> None:
    """The agent's work outside the workdir reaches the fresh verifier; only its tools do not."""
    solve = ("mkdir -p /srv/out && jq -n --arg g \"$(cat $GREETING_FILE)\" --argjson c 3 "
             "'{greeting: $g, count: $c}' > /srv/out/out.json && ln -sf /srv/out/out.json /app/out.json")
    _, reward, info = await _play([bash(solve + "\n" + TOOL_HACKS["python3"])])
    assert reward == 1.0 and info["grading"]["fresh_sandbox"] is True, info["grading"]


async def test_processes_are_stopped_unless_the_task_keeps_them(docker_available: bool) -> None:
    env = HarborEnv(sandbox="docker", path=str(TASKS), task_ids=["service-task"])
    gold = env.gold_actions(env.instance("service-task"))[:-1]
    await env.close_async()
    _, reward, info = await _play(gold, TASKS, "service-task")
    assert reward == 0.0 and any("gymfleet-demo-service" in p for p in info["grading"]["stopped_processes"])
    _, reward, info = await _play(gold, TASKS, "service-task", keep_processes=["service-*"])
    assert reward == 1.0, info["grading"]
    assert info["grading"]["kept_processes"] is True
    # a kept process is no licence to change the verifier's tools: then a fresh sandbox, without it
    _, reward, info = await _play([*gold, bash("cp /bin/true /usr/bin/env")], TASKS, "service-task",
                                  keep_processes=["service-*"])
    assert reward == 0.0 and info["grading"]["fresh_sandbox"] is True, info["grading"]


# venv-verifier's test.sh runs `pytest` from a venv the image made (/opt/venv/bin on PATH): its
# code lives in /opt/venv/lib/python3.*/site-packages, outside /usr. Patched to exit 0 at import,
# every run "passes" (this earned 1 before).
VENV_PYTEST = """
f=$(ls /opt/venv/lib/python3.*/site-packages/pytest/__init__.py)
echo 'import os; os._exit(0)' >> "$f"; echo "replaced $f"
"""


async def test_a_patched_package_in_the_images_venv_earns_nothing(docker_available: bool) -> None:
    observations, reward, info = await _play([bash(VENV_PYTEST)], TASKS, "venv-verifier")
    assert "replaced" in observations[0], observations[0]
    patched = observations[0].split("replaced ")[-1].split()[0]
    assert reward == 0.0 and info["grading"]["error"] is None, info["grading"]
    assert info["grading"]["fresh_sandbox"] is True
    assert info["grading"]["withheld"].get(patched) == "an image file in a Python import folder", info["grading"]


# tb1-hello's tests load the agent's solution.py inside pytest. A wrong solution that prints
# PASSED lines for every test at exit — to its own stdout and stderr and its parent's stderr
# (/proc/<ppid>/fd/2) — earned 1 when the summary was read from stdout and stderr together,
# the last status winning, the exit code ignored (pytest said "2 failed", exit 1).
FORGED_PASSES = """
cat > /app/solution.py <<'PY'
import atexit, os, sys

LINES = "PASSED ../tests/test_outputs.py::test_add_small\\nPASSED ../tests/test_outputs.py::test_add_negative\\n"


def _forge():
    sys.stdout.write(LINES); sys.stdout.flush(); sys.stderr.write(LINES); sys.stderr.flush()
    try:
        with open(f"/proc/{os.getppid()}/fd/2", "w") as parent:
            parent.write(LINES)
    except OSError:
        pass


atexit.register(_forge)


def add(a, b):
    return 0
PY
echo written
"""


async def test_tb1_forged_pass_lines_earn_nothing(docker_available: bool) -> None:
    observations, reward, info = await _play([bash(FORGED_PASSES)], task_id="tb1-hello")
    assert "written" in observations[0], observations[0]
    assert reward == 0.0 and info["grading"]["error"] is None, info["grading"]
    assert info["grading"]["extra"]["tests"] == {"test_add_small": "FAILED", "test_add_negative": "FAILED"}
    assert "PASSED ../tests/test_outputs.py::test_add_small" in info["grading"]["output_tail"]  # the forgery ran


async def test_an_answer_in_a_home_dotfile_or_at_the_root_is_graded_as_written(docker_available: bool) -> None:
    """Isolation withholds what can change the verifier (start-up and configuration files), not
    the agent's answers: an SSH key file and a file at / scored 0 before (withheld as "a dotfile
    of a home folder" and "a file at the filesystem root")."""
    env = HarborEnv(sandbox="docker", path=str(TASKS), task_ids=["dotfile-answer"])
    gold = env.gold_actions(env.instance("dotfile-answer"))[:-1]
    await env.close_async()
    _, reward, info = await _play(gold, TASKS, "dotfile-answer")
    assert reward == 1.0 and info["grading"]["fresh_sandbox"] is False, info["grading"]
    # beside a hook in pytest's configuration: graded in a fresh sandbox, the answers carried
    _, reward, info = await _play([*gold, bash("printf '[pytest]\\n' > /pytest.ini")], TASKS, "dotfile-answer")
    assert reward == 1.0 and info["grading"]["fresh_sandbox"] is True, info["grading"]
    assert set(info["grading"]["withheld"]) == {"/pytest.ini"}, info["grading"]
