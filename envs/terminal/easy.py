"""The easy tier of terminal tasks: single-command templates, each instantiated with many words.

``gymfleet/TerminalEasy-v0`` plays the task folders under ``envs/terminal/tasks-easy/``, which
this module writes (``python -m gymfleet.envs.terminal.easy`` regenerates them; a test checks the
folders on disk equal what it would write). Every template is one shell command away from done
(``echo``, ``mkdir``, ``cp``, ``mv``, ``rm``, ``wc -l``, ``>>``, ``chmod``) and is instantiated
with a few training words and four held-out words (:data:`HELDOUT_WORDS`): the held-out
instances test the skill a policy learnt on the same template with other words, not a memorised
answer. They are ordinary terminal tasks (``task.yaml``, gold ``solution.sh``, hidden
``tests/checks.py`` carrying their own expected data) graded by the same grader.
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

CHECKS_HEAD = '''\
import os
import sys
import unittest

sys.path.insert(0, os.environ["GYMFLEET_TEST_DIR"])
import gymfleet_testlib  # noqa: E402


def read(path):
    with open(path) as fh:
        return fh.read()


class Checks(unittest.TestCase):
'''
CHECKS_TAIL = '''

if __name__ == "__main__":
    gymfleet_testlib.main()
'''
RUN_SH = ('#!/bin/bash\n# Runs the hidden checks; they write $GYMFLEET_RESULT_FILE (see envs/terminal/README.md).\n'
          'exec python3 -I "$GYMFLEET_TEST_DIR/checks.py"\n')


@dataclass(frozen=True)
class EasyTask:
    """One instance of a template: what the task folder holds.

    Attributes:
        instruction: the task text.
        solution: the gold command (``solution.sh``).
        checks: the body of the hidden ``unittest.TestCase`` (indented methods).
        files: files put in the working directory at reset, name -> text.
        executable: file names in ``files`` that get mode 755.
    """

    instruction: str
    solution: str
    checks: str
    files: dict[str, str] = field(default_factory=dict)
    executable: tuple[str, ...] = ()


def _n_lines(word: str) -> int:
    return 3 + zlib.crc32(word.encode()) % 7


def _write_word(w: str) -> EasyTask:
    return EasyTask(f"Write the word {w} into the file answer.txt.", f"echo {w} > answer.txt",
                    f"    def test_answer(self):\n        self.assertEqual(read('answer.txt').strip(), {w!r})\n")


def _make_dir(w: str) -> EasyTask:
    return EasyTask(f"Create a directory named {w}.", f"mkdir {w}",
                    f"    def test_dir(self):\n        self.assertTrue(os.path.isdir({w!r}))\n")


def _copy_file(w: str) -> EasyTask:
    text = f"{w} data\n"
    return EasyTask(f"Copy the file {w}.txt to backup.txt.", f"cp {w}.txt backup.txt",
                    f"    def test_copy(self):\n        self.assertEqual(read('backup.txt'), {text!r})\n"
                    f"        self.assertEqual(read({w + '.txt'!r}), {text!r})\n", {f"{w}.txt": text})


def _rename_file(w: str) -> EasyTask:
    text = f"{w} notes\n"
    return EasyTask(f"Rename the file {w}.txt to done.txt.", f"mv {w}.txt done.txt",
                    f"    def test_renamed(self):\n        self.assertEqual(read('done.txt'), {text!r})\n"
                    f"        self.assertFalse(os.path.exists({w + '.txt'!r}))\n", {f"{w}.txt": text})


def _delete_file(w: str) -> EasyTask:
    return EasyTask(f"Delete the file {w}.txt and keep the other files.", f"rm {w}.txt",
                    f"    def test_deleted(self):\n        self.assertFalse(os.path.exists({w + '.txt'!r}))\n"
                    "        self.assertEqual(read('keep.txt'), 'keep me\\n')\n",
                    {f"{w}.txt": f"{w}\n", "keep.txt": "keep me\n"})


def _count_lines(w: str) -> EasyTask:
    n = _n_lines(w)
    body = "".join(f"{w} line {i}\n" for i in range(1, n + 1))
    return EasyTask(f"Write the number of lines in {w}.txt into the file count.txt.", f"wc -l < {w}.txt > count.txt",
                    f"    def test_count(self):\n        self.assertEqual(int(read('count.txt').split()[0]), {n})\n",
                    {f"{w}.txt": body})


def _append_line(w: str) -> EasyTask:
    return EasyTask(f"Append a line with the word {w} to the end of notes.txt.", f"echo {w} >> notes.txt",
                    "    def test_appended(self):\n"
                    f"        self.assertEqual(read('notes.txt').splitlines(), ['first', 'second', {w!r}])\n",
                    {"notes.txt": "first\nsecond\n"})


def _make_executable(w: str) -> EasyTask:
    return EasyTask(f"Make the script {w}.sh executable.", f"chmod +x {w}.sh",
                    f"    def test_executable(self):\n        self.assertTrue(os.access({w + '.sh'!r}, os.X_OK))\n"
                    f"        self.assertEqual(read({w + '.sh'!r}), 'echo {w}\\n')\n",
                    {f"{w}.sh": f"echo {w}\n"})


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


def task_files(task: EasyTask) -> dict[str, tuple[str, int]]:
    """The task folder's files, relative path -> (text, mode)."""
    yaml_text = (f"instruction: {task.instruction}\ndifficulty: easy\ncategory: easy-tier\n"
                 "tags: [single-command]\nmax_agent_turns: 2\ntimeout_s: 10\nrequires: [python3]\n")
    out = {"task.yaml": (yaml_text, 0o644), "solution.sh": (task.solution + "\n", 0o644),
           "tests/run.sh": (RUN_SH, 0o755), "tests/checks.py": (CHECKS_HEAD + task.checks + CHECKS_TAIL, 0o644)}
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
