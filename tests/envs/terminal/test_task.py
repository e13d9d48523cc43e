from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.envs.errors import TaskError
from gymfleet.envs.terminal import TerminalEnv
from gymfleet.envs.terminal.task import BUILTIN_TASKS_DIR, load_task, load_tasks
from tests.envs.terminal.conftest import write_task


def test_builtin_tasks_load_and_vary() -> None:
    tasks = load_tasks(BUILTIN_TASKS_DIR)
    assert len(tasks) >= 12
    assert {t.config.difficulty for t in tasks.values()} == {"easy", "medium", "hard"}
    assert {"text", "files", "git", "python", "sql", "build", "service", "permissions"} <= {
        t.config.category for t in tasks.values()
    }
    for task in tasks.values():
        assert task.solution_script.strip() and (task.tests_dir / "run.sh").is_file()


def test_defaults(tasks_dir: Path) -> None:
    cfg = load_task(tasks_dir / "done").config
    assert (cfg.image, cfg.network, cfg.difficulty) == ("terminal", False, "medium")


@pytest.mark.parametrize("missing", ["solution.sh", "tests/run.sh"])
def test_missing_file_is_named(tasks_dir: Path, missing: str) -> None:
    (tasks_dir / "done" / missing).unlink()
    with pytest.raises(TaskError, match=missing.replace(".", r"\.")):
        load_task(tasks_dir / "done")


def test_bad_yaml_fields_are_named(tmp_path: Path) -> None:
    write_task(tmp_path, "bad", yaml="instruction: x\nmax_agent_turns: 0\ncolour: red\n")
    with pytest.raises(TaskError, match="max_agent_turns") as err:
        load_task(tmp_path / "bad")
    assert "colour" in str(err.value)


def test_unparsable_yaml(tmp_path: Path) -> None:
    write_task(tmp_path, "bad", yaml="instruction: [unclosed\n")
    with pytest.raises(TaskError, match="not valid YAML"):
        load_task(tmp_path / "bad")


def test_unknown_task_ids_list_the_known(tasks_dir: Path) -> None:
    with pytest.raises(TaskError, match="known: done"):
        load_tasks(tasks_dir, ["nope"])


def test_missing_or_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="does not exist"):
        load_tasks(tmp_path / "absent")
    with pytest.raises(TaskError, match="no task folder"):
        load_tasks(tmp_path)


def test_env_args_from_the_command_line_are_coerced(tasks_dir: Path) -> None:
    write_task(tasks_dir, "other")
    env = TerminalEnv(sandbox="local", tasks_dir=str(tasks_dir), task_ids="other, done")
    assert env.instance_ids() == ["done", "other"]
