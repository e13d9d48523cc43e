"""The shell scripts that run inside a SWE sandbox: take the agent's diff, apply a patch, and
run the tests the way SWE-bench's ``eval.sh`` does.

:func:`eval_script_lines` is swebench 4.1.0's ``make_eval_script_list_py`` for the spec (test
files reset to the base commit, the test patch applied, the spec's ``install`` re-run, the same
test command and directives), without conda for gymfleet images (a venv is on PATH; official
images keep ``conda activate testbed``); a test pins it line for line against swebench's own
function over every spec of SWE-bench Lite. The harness runs it in two commands: everything
before the start marker (:func:`eval_setup_script`), then the test command alone
(:func:`test_run_script`), whose output and exit status the harness takes from the sandbox's
exec, a channel the code under test cannot write; it writes the markers itself.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath

from gymfleet.envs.swe import upstream
from gymfleet.envs.swe.canary import Canary
from gymfleet.envs.swe.image_scripts import START_COMMIT_FILE
from gymfleet.envs.swe.instances import SWEInstance
from gymfleet.envs.swe.specs import RepoSpec

REPO_DIR = "/testbed"
PATCH_PATH = "/tmp/gymfleet_patch.diff"
EVAL_SCRIPT_PATH = "/tmp/gymfleet_eval.sh"
_DELIMITER = "EOF_114329324912"  # swebench's heredoc delimiter
# swebench's order (run_evaluation.GIT_APPLY_CMDS): strict, with rejects, then fuzzy patch(1)
APPLY_COMMANDS = (
    "git apply --verbose",
    "git apply --verbose --reject",
    "patch --batch --fuzz=5 -p1 -i",
)
_CONDA = ("source /opt/miniconda3/bin/activate", "conda activate testbed")
_TEST_DIRS = {"test", "tests", "testing"}


def start_commit_command(base_commit: str) -> str:
    """Shell that prints the commit an agent's diff is taken against: the instance image's
    start commit (base commit plus the install's changes), else ``base_commit``."""
    return f"cat {START_COMMIT_FILE} 2>/dev/null || echo {base_commit}"


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


GIT_NEUTRAL = ("git -c core.quotePath=false -c core.fsmonitor= -c core.hooksPath=/dev/null "
               "-c diff.noprefix=false -c diff.mnemonicPrefix=false -c diff.relative=false "
               "-c color.ui=never")
"""git with the repository's settings that change how a diff is written overridden: the agent's
``.git/config`` (``diff.external``, ``diff.noprefix``, colors, an fsmonitor command) never
changes the diff the env grades."""
_DIFF_FLAGS = ("--no-ext-diff --no-textconv --no-color --no-relative --unified=3 "
               "--src-prefix=a/ --dst-prefix=b/")


def changed_files_command(base_commit: str) -> str:
    """Lists (NUL-separated) every file changed since the start commit (see
    :func:`start_commit_command`), untracked ones included."""
    start = start_commit_command(base_commit)
    return (f"cd {REPO_DIR} && {GIT_NEUTRAL} add -A && "
            f"{GIT_NEUTRAL} diff --cached {_DIFF_FLAGS} --name-only -z $({start})")


def diff_command(base_commit: str, paths: list[str]) -> str:
    """The diff of ``paths`` against the start commit (run after :func:`changed_files_command`)."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    start = start_commit_command(base_commit)
    return (f"cd {REPO_DIR} && {GIT_NEUTRAL} diff --cached --binary {_DIFF_FLAGS} $({start}) "
            f"-- {quoted}")


def apply_script() -> str:
    """Applies ``PATCH_PATH``: each of swebench's commands in turn, resetting the tree between
    attempts (the index refreshed first, so a reset rewrites only what an attempt changed);
    prints swebench's ``>>>>> Applied Patch`` or ``>>>>> Patch Apply Failed``. An attempt that
    exits 0 but leaves the tree unchanged counts as failed."""
    c = upstream.constants()
    # `patch --fuzz=5` exits 0 on some garbage without changing anything: that is a failure
    attempts = [
        f"if {cmd} {PATCH_PATH} && [ -n \"$(git status --porcelain)\" ]; then "
        f"echo '{c.APPLY_PATCH_PASS}'; exit 0; fi\n"
        "git checkout -q -f . && git clean -fdq"
        for cmd in APPLY_COMMANDS
    ]
    # one stream, so the log shows git's messages and the markers in the order they happened
    stamp = f"touch -d @$(( $(date +%s) - 1 )) {WRITTEN_STAMP}"  # find -newer: strictly after
    # an image's index has stale stat data (inodes, ctimes of the extracted layer): without a
    # refresh, the reset after a failed attempt rewrites every tracked file, which the check of
    # what the apply wrote then reports (psf__requests-863, pytest-dev__pytest-11148: CodeR)
    refresh = f"git -C {REPO_DIR} update-index -q --refresh >/dev/null 2>&1 || true"
    return "\n".join(["exec 2>&1", refresh, stamp, f"cd {REPO_DIR}", *attempts,
                      f"echo '{c.APPLY_PATCH_FAIL}'", "exit 1"]) + "\n"


def official_apply_script() -> str:
    """Applies ``PATCH_PATH`` as swebench 4.1.0's ``run_instance`` does: each of its
    ``GIT_APPLY_CMDS`` in order until one exits 0, with no reset between them (a ``--reject``
    attempt's partial changes stay for ``patch --batch``, which reverse-applies hunks it finds
    already applied); prints ``>>>>> Applied Patch`` or ``>>>>> Patch Apply Failed``."""
    c = upstream.constants()
    attempts = [f"if {cmd} {PATCH_PATH}; then echo '{c.APPLY_PATCH_PASS}'; exit 0; fi"
                for cmd in official_apply_commands()]
    return "\n".join(["exec 2>&1", f"cd {REPO_DIR}", *attempts, f"echo '{c.APPLY_PATCH_FAIL}'",
                      "exit 1"]) + "\n"


def official_apply_commands() -> tuple[str, ...]:
    """swebench 4.1.0's ``run_evaluation.GIT_APPLY_CMDS`` (read from the installed package)."""
    return tuple(upstream.module("harness.run_evaluation").GIT_APPLY_CMDS)


# case-sensitive: swebench's own ">>>>> Patch Apply Failed" marker says nothing of why
_APPLY_FAILURE = re.compile(r"^(error|fatal):|FAILED|does not apply|can't find file|malformed|corrupt|garbage")


def apply_failure(log: str, n_chars: int = 800) -> str:
    """Why the apply commands failed, for an instance's error: the last line of ``log`` that
    reports a failure (git's ``error: ...``, patch's ``1 out of 1 hunk FAILED ...``), then the
    log's last ``n_chars`` characters.

    The line comes first because the error's first line is what the CLI prints; the tail alone
    can start inside a file's text that ``git apply`` echoed (``while searching for:``).

    Args:
        log: the apply script's output (stdout and stderr, in order).
        n_chars: characters of the log's end kept after that line.

    Returns:
        ``"<failure line>\n<tail>"``; the log's last line stands in when no line reports a failure.
    """
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    failing = [line for line in lines if _APPLY_FAILURE.search(line)]
    first = failing[-1] if failing else (lines[-1] if lines else "no output")
    return f"{first}\n{log.strip()[-n_chars:]}"


WRITTEN_STAMP = "/tmp/gymfleet-apply-stamp"


def written_files_command() -> str:
    """Lists (NUL-separated, ``./``-prefixed) every file the apply wrote after
    :data:`WRITTEN_STAMP` (ignored ones included, ``.git`` too, but git's own index), then
    git's status of tracked and untracked changes (deletions included)."""
    git = ("git -c core.quotePath=false -c status.renames=false -c core.fsmonitor= "
           "status --porcelain=v1 -z --untracked-files=all --no-renames")
    return (f"cd {REPO_DIR} && find . \\( -type f -o -type l \\) -newer {WRITTEN_STAMP} "
            "! -path ./.git/index -print0 && printf '\\0--status--\\0' && " + git)


def parse_written_files(output: str) -> list[str]:
    """The repository paths :func:`written_files_command` printed, each once."""
    found, _, status = output.partition("\0--status--\0")
    paths = [p[2:] for p in found.split("\0") if p.startswith("./")]
    paths += [entry[3:] for entry in status.split("\0") if len(entry) > 3]
    return list(dict.fromkeys(paths))


def eval_script_lines(instance: SWEInstance, spec: RepoSpec, conda: bool = False) -> list[str]:
    """swebench's ``make_eval_script_list_py`` for ``spec`` (conda lines only when ``conda``),
    with the test files reset as upstream fixed it (:func:`reset_test_commands`)."""
    c = upstream.constants()
    resets = reset_test_commands(instance)
    activate = list(_CONDA) if conda else []
    return [
        *activate,
        f"cd {REPO_DIR}",
        *spec.eval_commands,
        f"git config --global --add safe.directory {REPO_DIR}",
        f"cd {REPO_DIR}",
        "git status",
        "git show",
        f"git -c core.fileMode=false diff {instance.base_commit}",
        *activate,
        *([spec.install] if spec.install else []),
        *resets,
        f"git apply -v - <<'{_DELIMITER}'\n{instance.test_patch}\n{_DELIMITER}",
        f": '{c.START_TEST_OUTPUT}'",
        spec.test_command(instance.row()),
        f": '{c.END_TEST_OUTPUT}'",
        *resets,
    ]


def reset_test_commands(instance: SWEInstance) -> list[str]:
    """Puts the test patch's files back to the base commit before it is applied (and after the
    tests): ``git checkout <base> <modified files>`` and ``rm -f <new files>``. SWE-bench #539/#542
    (fixing #518): 4.1.0 writes a bare ``git checkout <base>`` when the test patch only adds
    files, which moves HEAD off the image's setup commit and drops its edits (sphinx's
    ``tox.ini -rA``), so pytest prints no per-test results."""
    modified = upstream.modified_files(instance.test_patch)
    added = upstream.new_files(instance.test_patch)
    commands = [f"git checkout {instance.base_commit} {' '.join(modified)}"] if modified else []
    return commands + ([f"rm -f {' '.join(added)}"] if added else [])


INSTALL_FAILED = ">>>>> gymfleet: the post-patch install failed"
INSTALL_FAILED_EXIT = 97


def eval_setup_script(instance: SWEInstance, spec: RepoSpec, conda: bool = False) -> str:
    """The eval script up to the start marker: reset test files, re-run the install, apply the
    test patch. Its exit status is the test patch's ``git apply`` (the last command), or
    ``INSTALL_FAILED_EXIT`` when the install failed (swebench's script goes on silently: the
    tests would then run on the image's old install)."""
    lines = eval_script_lines(instance, spec, conda)
    start = lines.index(f": '{upstream.constants().START_TEST_OUTPUT}'")
    checked = [f"{line} || {{ echo '{INSTALL_FAILED}'; exit {INSTALL_FAILED_EXIT}; }}"
               if spec.install and line == spec.install else line for line in lines[:start]]
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *checked]) + "\n"


def test_run_script(instance: SWEInstance, spec: RepoSpec, conda: bool = False,
                    junit_path: str | None = None, canary: Canary | None = None) -> str:
    """The test command alone (after the conda activation and the spec's ``eval_commands``),
    last, so that the exit status is the command's (passed in memory with ``bash -c``, so the
    code under test cannot rewrite what runs after it); with ``junit_path``, pytest also
    writes its JUnit report there; with ``canary``, its file is among the test files."""
    activate = list(_CONDA) if conda else []
    junit = f" --junitxml={shlex.quote(junit_path)}" if junit_path else ""
    files = spec.test_directives(instance.row())
    command = " ".join([spec.test_cmd, *(canary.files(files) if canary else files)])
    return "\n".join(["set -u", *activate, f"cd {REPO_DIR}", *spec.eval_commands,
                      f"{command}{junit} 2>&1"]) + "\n"


def python_script(source: str, conda: bool = False) -> str:
    """Shell that runs Python ``source`` with the sandbox's environment (conda's when
    ``conda``)."""
    activate = list(_CONDA) if conda else []
    delimiter = "GYMFLEET_PY_EOF"
    # -I and cd /: no file of the (patched) repository can shadow a module the script imports
    return "\n".join([*activate, "cd /", f"python -I - <<'{delimiter}'", source,
                      delimiter]) + "\n"
