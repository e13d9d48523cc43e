"""What a verifier fetches, staged at build time whatever flags its script uses, loudly when it
fails; a failed build's reason; the verifier's offline environment (no Docker)."""

from __future__ import annotations

import asyncio

from gymfleet.envs.harbor.build import _one_line
from gymfleet.envs.harbor.staging import (
    STAGING_FAILED, VERIFIER_APT_FILES, offline_script, staging_lines, verifier_staging,
)
from gymfleet.envs.harbor.env import EXAMPLES_DIR
from gymfleet.envs.harbor.grader import run_verifier
from gymfleet.envs.harbor.task import load_task
from tests.envs.harbor.test_grader import ScriptedVerifier

# TB2 templates: uv's pip-style cache flag, -w and --with, split over continuation lines
TB2_TEST_SH = """\
#!/bin/bash
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx --no-cache-dir \\
  -p 3.13 \\
  -w pytest==8.4.1 --with pytest-json-ctrf==0.3.5 \\
  --no-cache pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA -n 2
uv run --no-cache --with pytest==8.4.1 pytest /tests -rA
pip install --no-cache-dir numpy==2.1.0
"""


def test_no_cache_flags_do_not_make_staging_a_no_op() -> None:
    # before: the replay kept --no-cache-dir, so uv's cache stayed empty and the verifier found
    # no pytest offline; `uv run --with` was not staged at all
    staging = verifier_staging(TB2_TEST_SH)
    assert staging.replay == ["uvx -p 3.13 -w pytest==8.4.1 --with pytest-json-ctrf==0.3.5 pytest --version",
                              "uv run --with pytest==8.4.1 pytest --version", "pip install numpy==2.1.0"]


def test_the_verifier_script_runs_without_uvs_throw_away_cache() -> None:
    script = offline_script(TB2_TEST_SH)
    assert "--no-cache" not in script.split("pip install")[0]  # every uv/uvx command
    assert "pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA -n 2\n" in script  # pytest's own -n kept
    assert script.endswith("pip install --no-cache-dir numpy==2.1.0\n")  # pip's flag is harmless: left alone
    assert script.count("\n") == TB2_TEST_SH.count("\n")  # lines and continuations as written
    assert offline_script("uv --version\necho --no-cache\n") == "uv --version\necho --no-cache\n"


def test_a_staging_step_that_fails_fails_the_build_and_says_which() -> None:
    # before: `{ ...; } || true` hid the failure and the build went on
    lines = staging_lines(verifier_staging(TB2_TEST_SH), None)
    replay = next(line for line in lines if "mktemp" in line)
    assert "|| true" not in replay and replay.count("exit 1") == 3 and STAGING_FAILED.split(":")[0] in replay


def test_a_failed_builds_reason_is_the_real_error_not_dockers_last_line() -> None:
    error = "The command '/bin/sh -c pip install nope==9' returned a non-zero code: 1"
    tail = ["Step 5/7 : RUN pip install nope==9", " ---> Running in abc",
            "ERROR: No matching distribution found for nope==9", "[notice] A new release of pip is available",
            "Removing intermediate container abc"]
    assert _one_line(error, tail) == f"{error} (ERROR: No matching distribution found for nope==9)"
    staged = [*tail, STAGING_FAILED + "uvx pytest --version", "Removing intermediate container def"]
    assert _one_line(error, staged).endswith(f"({STAGING_FAILED}uvx pytest --version)")
    assert _one_line("failed", ["Removing intermediate container x", "something odd"]) == "failed (something odd)"
    assert _one_line("failed", ["E: Unable to locate package nodejs", "\x1b[0m"]) == "failed (E: Unable to locate package nodejs)"


def test_the_verifier_runs_apt_without_retries() -> None:
    # the bases retry apt 5 times with back-off: an offline `apt-get update` took 32 s per grading
    sandbox = ScriptedVerifier(reward_files={"reward.txt": b"1"})
    seen: dict[str, str] = {}
    exec_ = sandbox.exec

    async def exec(cmd, timeout_s=60.0, workdir=None, env=None):  # type: ignore[no-untyped-def]
        if cmd.startswith("bash /tests/"):
            seen.update(env or {})
        return await exec_(cmd, timeout_s, workdir, env)

    sandbox.exec = exec  # type: ignore[method-assign]
    report = asyncio.run(run_verifier(sandbox, load_task(EXAMPLES_DIR / "harbor-hello"), "/app"))  # type: ignore[arg-type]
    assert report.reward == 1.0
    apt_config = seen["APT_CONFIG"]
    assert sandbox.files[apt_config] == VERIFIER_APT_FILES[apt_config]
    last = VERIFIER_APT_FILES[apt_config].decode().split('"')[1]
    assert sandbox.files[last] == b'Acquire::Retries "0";\n'
