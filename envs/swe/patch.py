"""The shell scripts that run inside a SWE sandbox: reset to the base commit, take the agent's
diff, apply a patch, and run the tests the way SWE-bench's ``eval.sh`` does.

The eval script is swebench 4.1.0's ``make_eval_script_list_py`` without conda (the gymfleet
images have a venv on PATH; official images get ``conda activate testbed`` back), plus the
test command's exit status recorded after the end marker (swebench 5.x
``record_test_exit_code``), which grading uses to reject logs of crashed runs.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.grading import TEST_EXIT_CODE
from gymfleet.envs.swe.instances import SWEInstance
from gymfleet.envs.swe.specs import RepoSpec

REPO_DIR = "/testbed"
PATCH_PATH = "/tmp/gymfleet_patch.diff"
EVAL_SCRIPT_PATH = "/tmp/gymfleet_eval.sh"
TEST_LOG_PATH = "/tmp/gymfleet_test_output.txt"
# swebench's order (run_evaluation.GIT_APPLY_CMDS): strict, with rejects, then fuzzy patch(1)
APPLY_COMMANDS = (
    "git apply --verbose",
    "git apply --verbose --reject",
    "patch --batch --fuzz=5 -p1 -i",
)
_CONDA = ("source /opt/miniconda3/bin/activate", "conda activate testbed")
_TEST_DIRS = {"test", "tests", "testing"}


def setup_script(base_commit: str, hide_future: bool = True) -> str:
    """Puts ``/testbed`` at ``base_commit`` with a clean tree.

    With ``hide_future``, every ref is deleted and unreachable objects pruned, so the agent
    cannot find the fix in the history (the image holds the whole mirror).
    """
    lines = [
        "set -euo pipefail",
        f"cd {REPO_DIR}",
        f"git -c advice.detachedHead=false checkout -q -f {base_commit}",
        "git clean -fdq",
    ]
    if hide_future:
        lines += [
            "git for-each-ref --format='%(refname)' | while read -r ref; do "
            'git update-ref -d "$ref"; done',
            "git checkout -q -b main",
            "git reflog expire --expire=now --all",
            "git gc -q --prune=now",
        ]
    return "\n".join(lines) + "\n"


def is_test_file(path: str, test_files: set[str]) -> bool:
    """True for a file the test patch touches, or one that looks like a test
    (under ``test``/``tests``/``testing``, ``test_*.py``, ``*_test.py``, ``conftest.py``)."""
    if path in test_files:
        return True
    p = PurePosixPath(path)
    name = p.name
    return (
        bool(_TEST_DIRS & set(p.parts[:-1]))
        or name == "conftest.py"
        or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")))
    )


def changed_files_command(base_commit: str) -> str:
    """Lists (NUL-separated) every file changed since ``base_commit``, untracked ones included."""
    return f"cd {REPO_DIR} && git add -A && git diff --cached --name-only -z {base_commit}"


def diff_command(base_commit: str, paths: list[str]) -> str:
    """The diff of ``paths`` against ``base_commit`` (run after :func:`changed_files_command`)."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    return f"cd {REPO_DIR} && git diff --cached --binary {base_commit} -- {quoted}"


def apply_script() -> str:
    """Applies ``PATCH_PATH``: each of swebench's commands in turn, resetting the tree between
    attempts; prints swebench's ``>>>>> Applied Patch`` or ``>>>>> Patch Apply Failed``. An
    attempt that exits 0 but leaves the tree unchanged counts as failed."""
    c = upstream.constants()
    # `patch --fuzz=5` exits 0 on some garbage without changing anything: that is a failure
    attempts = [
        f"if {cmd} {PATCH_PATH} && [ -n \"$(git status --porcelain)\" ]; then "
        f"echo '{c.APPLY_PATCH_PASS}'; exit 0; fi\n"
        "git checkout -q -f . && git clean -fdq"
        for cmd in APPLY_COMMANDS
    ]
    return "\n".join([f"cd {REPO_DIR}", *attempts, f"echo '{c.APPLY_PATCH_FAIL}'", "exit 1"]) + "\n"


def eval_script(instance: SWEInstance, spec: RepoSpec, conda: bool = False) -> str:
    """The test run: reset the test files, apply the test patch, run the tests between
    swebench's markers, record the exit status, restore the test files."""
    c = upstream.constants()
    test_files = upstream.modified_files(instance.test_patch)
    reset_tests = (
        f"git checkout {instance.base_commit} {' '.join(shlex.quote(f) for f in test_files)}"
        if test_files else ":"
    )
    delimiter = "EOF_GYMFLEET_114329324912"
    while delimiter in instance.test_patch:
        delimiter += "_"
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        *(_CONDA if conda else ()),
        f"cd {REPO_DIR}",
        *spec.eval_commands,
        "git status",
        f"git -c core.fileMode=false diff {instance.base_commit}",
        reset_tests,
        f"git apply -v - <<'{delimiter}'\n{instance.test_patch}\n{delimiter}",
        f": '{c.START_TEST_OUTPUT}'",
        spec.test_command(instance.row()),
        "gymfleet_rc=$?",
        f": '{c.END_TEST_OUTPUT}'",
        f"echo '{TEST_EXIT_CODE}: '$gymfleet_rc",
        reset_tests,
    ]
    return "\n".join(lines) + "\n"
