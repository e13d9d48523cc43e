"""The easy tier of terminal tasks: single-command templates, each instantiated with many words.

``gymfleet/TerminalEasy-v0`` plays the task folders under ``envs/terminal/tasks-easy/``, which
this module writes (``python -m gymfleet.envs.terminal.easy`` regenerates them; a test checks the
folders on disk equal what it would write). Every template is one shell command away from done
(``echo``, ``mkdir``, ``cp``, ``mv``, ``rm``, ``wc -l``, ``>>``, ``chmod``) and is instantiated
with a few training words and four held-out words (:data:`HELDOUT_WORDS`): the held-out
instances test the skill a policy learnt on the same template with other words, not a memorised
answer. They are ordinary terminal tasks (``task.yaml``, gold ``solution.sh``, hidden
``tests/run.sh`` carrying their own expected data) graded by the same grader; their checks only
read files, so they are bash functions on ``gymfleet_testlib.sh``: no Python interpreter starts
to grade them (it was the largest CPU cost of an easy rollout: ``docs/performance.md``).
"""

from __future__ import annotations

import shutil
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

EASY_TASKS_DIR = Path(__file__).resolve().parent / "tasks-easy"
"""Where the easy tier's task folders live (``gymfleet/TerminalEasy-v0``'s ``tasks_dir``)."""

TRAIN_WORDS = ["apple", "river", "stone", "cloud", "tiger", "maple", "piano", "lemon"]
"""The words of the training instances of every template."""
HELDOUT_WORDS = ["orbit", "velvet", "canyon", "harbor"]
"""The words of the held-out instances (``<template>-orbit``, ``<template>-velvet``, ...)."""

RUN_SH_HEAD = """\
#!/bin/bash
# The hidden checks, in bash: they only read files, so no interpreter starts for them.
# gymfleet_testlib.sh reads the nonce and writes $GYMFLEET_RESULT_FILE (see envs/terminal/README.md).
. "$GYMFLEET_TEST_DIR/gymfleet_testlib.sh"
"""


@dataclass(frozen=True)
class EasyTask:
    """One instance of a template: what the task folder holds.

    Attributes:
        instruction: the task text.
        solution: the gold command (``solution.sh``).
        checks: the hidden checks, check name -> bash body (its status decides; ``gf_*``
            helpers of ``gymfleet_testlib.sh`` name what failed).
        files: files put in the working directory at reset, name -> text.
        executable: file names in ``files`` that get mode 755.
    """

    instruction: str
    solution: str
    checks: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)
    executable: tuple[str, ...] = ()


def _n_lines(word: str) -> int:
    return 3 + zlib.crc32(word.encode()) % 7


def _q(text: str) -> str:
    """``text`` as one bash word, ANSI-C quoted (newlines as \\n)."""
    return "$'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def _require(test: str, why: str) -> str:
    """A check statement: ``test`` (bash) or the check fails with ``why``."""
    return f"{test} || {{ __gf_why={_q(why)}; return 1; }}"


def _absent(path: str) -> str:
    return _require(f"[ ! -e {_q(path)} ]", f"{path} still exists")


def _write_word(w: str) -> EasyTask:
    return EasyTask(f"Write the word {w} into the file answer.txt.", f"echo {w} > answer.txt",
                    {"test_answer": f"gf_equal_stripped answer.txt {_q(w)}"})


def _make_dir(w: str) -> EasyTask:
    return EasyTask(f"Create a directory named {w}.", f"mkdir {w}",
                    {"test_dir": _require(f"[ -d {_q(w)} ]", f"no directory {w}")})


def _copy_file(w: str) -> EasyTask:
    text = f"{w} data\n"
    return EasyTask(f"Copy the file {w}.txt to backup.txt.", f"cp {w}.txt backup.txt",
                    {"test_copy": f"gf_equal backup.txt {_q(text)} || return 1; gf_equal {_q(w + '.txt')} {_q(text)}"},
                    {f"{w}.txt": text})


def _rename_file(w: str) -> EasyTask:
    text = f"{w} notes\n"
    return EasyTask(f"Rename the file {w}.txt to done.txt.", f"mv {w}.txt done.txt",
                    {"test_renamed": f"gf_equal done.txt {_q(text)} || return 1; {_absent(w + '.txt')}"},
                    {f"{w}.txt": text})


def _delete_file(w: str) -> EasyTask:
    return EasyTask(f"Delete the file {w}.txt and keep the other files.", f"rm {w}.txt",
                    {"test_deleted": f"{_absent(w + '.txt')}; gf_equal keep.txt {_q('keep me' + chr(10))}"},
                    {f"{w}.txt": f"{w}\n", "keep.txt": "keep me\n"})


def _count_lines(w: str) -> EasyTask:
    n = _n_lines(w)
    body = "".join(f"{w} line {i}\n" for i in range(1, n + 1))
    check = ("local text first rest; " + _require("gf_read text count.txt", "no regular file count.txt")
             + '; read -r first rest <<< "$text"; '
             + _require(f"[[ $first =~ ^[0-9]+$ ]] && (( 10#$first == {n} ))", "count.txt does not start with the count"))
    return EasyTask(f"Write the number of lines in {w}.txt into the file count.txt.", f"wc -l < {w}.txt > count.txt",
                    {"test_count": check}, {f"{w}.txt": body})


def _append_line(w: str) -> EasyTask:
    want = f"first\nsecond\n{w}"
    return EasyTask(f"Append a line with the word {w} to the end of notes.txt.", f"echo {w} >> notes.txt",
                    {"test_appended": f"gf_equal notes.txt {_q(want + chr(10))} 2>/dev/null || gf_equal notes.txt {_q(want)}"},
                    {"notes.txt": "first\nsecond\n"})


def _make_executable(w: str) -> EasyTask:
    script = f"{w}.sh"
    return EasyTask(f"Make the script {script} executable.", f"chmod +x {script}",
                    {"test_executable": _require(f"[ -x {_q(script)} ]", f"{script} is not executable")
                                        + f"; gf_equal {_q(script)} {_q('echo ' + w + chr(10))}"},
                    {script: f"echo {w}\n"})


TEMPLATES: dict[str, Callable[[str], EasyTask]] = {
    "write-word": _write_word, "make-dir": _make_dir, "copy-file": _copy_file, "rename-file": _rename_file,
    "delete-file": _delete_file, "count-lines": _count_lines, "append-line": _append_line,
    "make-executable": _make_executable,
}
"""Template name -> the instance for a word; task ids are ``<template>-<word>``."""


def instance_ids(words: list[str]) -> list[str]:
    """Every template's task id for each of ``words``, template-major."""
    return [f"{name}-{w}" for name in TEMPLATES for w in words]


def heldout_ids() -> list[str]:
    """The held-out instances: every template with each of :data:`HELDOUT_WORDS`."""
    return instance_ids(HELDOUT_WORDS)


def run_sh(task: EasyTask) -> str:
    """The hidden ``tests/run.sh``: one bash function per check, then ``gf_main`` over them."""
    functions = "".join(f"{name}() {{\n    {body}\n}}\n" for name, body in task.checks.items())
    return RUN_SH_HEAD + functions + f"gf_main {' '.join(task.checks)}\n"


def task_files(task: EasyTask) -> dict[str, tuple[str, int]]:
    """The task folder's files, relative path -> (text, mode)."""
    yaml_text = (f"instruction: {task.instruction}\ndifficulty: easy\ncategory: easy-tier\n"
                 "tags: [single-command]\nmax_agent_turns: 2\ntimeout_s: 10\n")
    out = {"task.yaml": (yaml_text, 0o644), "solution.sh": (task.solution + "\n", 0o644),
           "tests/run.sh": (run_sh(task), 0o755)}
    for name, text in task.files.items():
        out[f"files/{name}"] = (text, 0o755 if name in task.executable else 0o644)
    return out


def all_tasks() -> dict[str, EasyTask]:
    """Every easy-tier instance, training and held-out, by task id."""
    words = TRAIN_WORDS + HELDOUT_WORDS
    return {f"{name}-{w}": make(w) for name, make in TEMPLATES.items() for w in words}


def write_tasks(folder: Path = EASY_TASKS_DIR) -> int:
    """Writes every easy-tier task folder under ``folder`` (emptied first); returns how many."""
    if folder.exists():
        shutil.rmtree(folder)
    tasks = all_tasks()
    for task_id, task in tasks.items():
        for rel, (text, mode) in task_files(task).items():
            path = folder / task_id / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            path.chmod(mode)
    return len(tasks)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else EASY_TASKS_DIR
    print(f"wrote {write_tasks(target)} easy-tier tasks to {target}")
