"""Task folders are read without following links out of them (``envs/task_files.py``), in each
family that reads one: terminal, Harbor, slides. A link out is refused in one line naming it."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from gymfleet.envs.errors import TaskError
from gymfleet.envs.harbor.env import EXAMPLES_DIR
from gymfleet.envs.harbor.task import load_task as load_harbor_task
from gymfleet.envs.slides.brief import default_briefs_dir, gold_deck, load_briefs
from gymfleet.envs.slides.errors import BriefError
from gymfleet.envs.task_files import folder_files, read_text, refuse_links
from gymfleet.envs.terminal import TerminalEnv
from tests.envs.harbor.test_grader import grade as harbor_grade
from tests.envs.terminal.conftest import write_task

SECRET = "root:$y$secret-hash:19000:0:99999:7:::\n"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host file no task may hand out (stands for /etc/shadow)."""
    path = tmp_path / "host" / "shadow"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def _one_line_naming(exc: pytest.ExceptionInfo[BaseException], name: str) -> None:
    message = str(exc.value)
    assert "\n" not in message and name in message and "link" in message, message
    assert "secret-hash" not in message


def test_links_inside_are_read_and_links_out_refused(tmp_path: Path, secret: Path) -> None:
    task = tmp_path / "task"
    (task / "files" / "sub").mkdir(parents=True)
    (task / "files" / "a.txt").write_text("a")
    (task / "files" / "b.txt").symlink_to("a.txt")  # inside: read as the file
    assert folder_files(task / "files", task) == {"a.txt": (b"a", 0o644), "b.txt": (b"a", 0o644)}
    refuse_links(task)
    (task / "files" / "sub" / "shadow").symlink_to(secret)
    with pytest.raises(TaskError) as exc:
        folder_files(task / "files", task)
    _one_line_naming(exc, "files/sub/shadow")
    with pytest.raises(TaskError):
        refuse_links(task)
    (task / "files" / "sub" / "shadow").unlink()
    (task / "files" / "sub" / "up").symlink_to(secret.parent)  # a folder out, through a folder link
    with pytest.raises(TaskError) as exc:
        folder_files(task / "files", task)
    _one_line_naming(exc, "files/sub/up")
    (task / "linked").symlink_to(secret.parent, target_is_directory=True)
    with pytest.raises(TaskError) as exc:
        read_text(task, task / "linked" / "shadow")
    _one_line_naming(exc, "linked")


def test_a_terminal_task_linking_out_is_refused(tmp_path: Path, secret: Path) -> None:
    folder = write_task(tmp_path / "tasks", "done")
    (folder / "files").mkdir()
    (folder / "files" / "shadow").symlink_to(secret)
    with pytest.raises(TaskError) as exc:
        TerminalEnv(sandbox="local", tasks_dir=tmp_path / "tasks")
    _one_line_naming(exc, "files/shadow")
    (folder / "files" / "shadow").unlink()
    (folder / "solution.sh").unlink()
    (folder / "solution.sh").symlink_to(secret)  # the gold demonstration would carry it
    with pytest.raises(TaskError) as exc:
        TerminalEnv(sandbox="local", tasks_dir=tmp_path / "tasks")
    _one_line_naming(exc, "solution.sh")


def test_a_harbor_tests_link_out_never_reaches_the_verifier(tmp_path: Path, secret: Path) -> None:
    folder = tmp_path / "harbor-hello"
    shutil.copytree(EXAMPLES_DIR / "harbor-hello", folder)
    task = load_harbor_task(folder)
    (folder / "tests" / "shadow").symlink_to(secret)
    with pytest.raises(TaskError) as exc:
        harbor_grade(task)
    _one_line_naming(exc, "tests/shadow")
    (folder / "instruction.md").unlink()
    (folder / "instruction.md").symlink_to(secret)  # shown to the policy
    with pytest.raises(TaskError) as exc:
        load_harbor_task(folder)
    _one_line_naming(exc, "instruction.md")


def test_a_slides_brief_linking_out_is_refused(tmp_path: Path, secret: Path) -> None:
    briefs = tmp_path / "briefs"
    shutil.copytree(default_briefs_dir(), briefs)
    brief_id = sorted(load_briefs(briefs))[0]
    gold = briefs / "gold" / f"{brief_id}.html"
    gold.unlink()
    gold.symlink_to(secret)
    with pytest.raises(BriefError) as exc:
        gold_deck(brief_id, briefs)
    _one_line_naming(exc, f"gold/{brief_id}.html")
    (briefs / "zz-shadow.yaml").symlink_to(secret)
    with pytest.raises(BriefError) as exc:
        load_briefs(briefs)
    _one_line_naming(exc, "zz-shadow.yaml")
