"""`gymfleet runs list|show` at 80 columns: long ids fold onto more lines, never cut with an ellipsis."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.core.records import Message, RolloutStatus
from gymfleet.orchestrator.store import GroupSpec, TrajectoryStore
from gymfleet.orchestrator.store.schema import RunStatus
from tests.orchestrator.store.conftest import make_trajectory

RUN_ID = "a-very-long-run-identifier-for-the-terminal-mix-2024-06-01-seed-17"
TASK = "a-task-with-a-rather-long-name-too"


async def _fill(url: str) -> None:
    async with await TrajectoryStore.open(url) as store:
        await store.start_run(RUN_ID, {})
        group = GroupSpec(f"{RUN_ID}/g", RUN_ID, TASK, "gymfleet-test/Echo-v0", "i0", 1)
        await store.create_group(group)
        await store.add(make_trajectory(RUN_ID, group.group_id, 0), task=TASK)
        await store.set_run_status(RUN_ID, RunStatus.completed_budget)


def _column(output: str, after: str) -> str:
    """The first column of a table's body, its folded pieces joined."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(after)) + 2  # header, rule
    body = []
    for line in lines[start:]:
        if not line.strip():
            break
        body.append(line.split()[0])
    return "".join(body)


def test_long_ids_fold_instead_of_being_cut(tmp_path: Path) -> None:
    url = str(tmp_path / "store.db")
    asyncio.run(_fill(url))
    listed = CliRunner().invoke(app, ["runs", "list", "--store", url], env={"COLUMNS": "80"})  # a narrow terminal
    assert listed.exit_code == 0, listed.output
    assert "…" not in listed.output and max(map(len, listed.output.splitlines())) <= 80
    assert _column(listed.output, "run ") == RUN_ID
    assert "completed (budget)" in listed.output
    shown = CliRunner().invoke(app, ["runs", "show", RUN_ID, "--store", url, "--n", "1"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    assert "…" not in shown.output and max(map(len, shown.output.splitlines())) <= 80
    assert _column(shown.output, "task ") == TASK
    assert f"{RUN_ID}/g/0/a1" in shown.output.replace("\n", "")


def test_runs_outside_the_current_folder_are_found_by_runs_dir_or_its_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "project" / "runs"
    (runs / RUN_ID).mkdir(parents=True)
    asyncio.run(_fill(str(runs / RUN_ID / "store.db")))
    monkeypatch.chdir(tmp_path)  # a folder without ./runs
    monkeypatch.delenv("GYMFLEET_RUNS_DIR", raising=False)
    missing = CliRunner().invoke(app, ["runs", "show", RUN_ID, "--n", "1"])
    assert missing.exit_code == 2 and "--runs-dir" in missing.output
    by_flag = CliRunner().invoke(app, ["runs", "show", RUN_ID, "--n", "1", "--runs-dir", str(runs)])
    assert by_flag.exit_code == 0 and _column(by_flag.output, "task ") == TASK, by_flag.output
    by_env = CliRunner().invoke(app, ["runs", "list"], env={"GYMFLEET_RUNS_DIR": str(runs)})
    assert by_env.exit_code == 0 and "completed (budget)" in by_env.output, by_env.output


def test_a_store_without_runs_says_so(tmp_path: Path) -> None:
    url = str(tmp_path / "empty.db")

    async def create() -> None:
        from gymfleet.orchestrator.store import TrajectoryStore

        async with await TrajectoryStore.open(url):
            pass

    asyncio.run(create())
    listed = CliRunner().invoke(app, ["runs", "list", "--store", url], env={"COLUMNS": "80"})  # a narrow terminal
    assert listed.exit_code == 0 and f"no runs in {url}" in listed.output, listed.output


async def _fill_graded(url: str) -> None:
    """Four truncated TerminalEasy-like rollouts: two passed, two failed, one of each per version."""
    async with await TrajectoryStore.open(url) as store:
        await store.start_run("graded", {})
        for i, (reward, version) in enumerate([(1.0, 0), (0.0, 0), (1.0, 2), (0.0, 2)]):
            group = GroupSpec(f"graded/g{i}", "graded", "easy", "gymfleet/TerminalEasy-v0", f"i{i}", 1)
            await store.create_group(group)
            traj = make_trajectory("graded", group.group_id, 0, reward=reward)
            traj.versions[traj.loss_mask == 1] = version
            traj.status = RolloutStatus.truncated  # every TerminalEasy rollout is, pass or fail
            traj.messages[1] = Message("assistant", "```bash\nfor w in alpha beta gamma delta epsilon zeta eta theta iota "
                                                    "kappa lambda mu nu xi omicron pi rho; do echo $w >> out.txt; done\n```")
            traj.metrics = {"grading": {"tests": {"test_file": "passed" if reward else "failed"},
                                        "failures": {} if reward else {"test_file": "out.txt holds 'alpha', expected 'beta'"},
                                        "error": None}}
            await store.add(traj, task="easy")


def test_show_filters_by_verdict_reward_and_version_and_prints_the_graders_reason(tmp_path: Path) -> None:
    # Before: `runs show` filtered by status only (every TerminalEasy rollout is truncated) and the
    # grader's reason was only in the export; piped output hard-wrapped code at 80 columns.
    url = str(tmp_path / "store.db")
    asyncio.run(_fill_graded(url))
    failed = CliRunner().invoke(app, ["runs", "show", "graded", "--store", url, "--verdict", "fail", "--n", "9"],
                                env={"COLUMNS": ""})
    assert failed.exit_code == 0, failed.output
    assert failed.output.count("verdict fail") == 2 and "verdict pass" not in failed.output
    assert "grader: 0/1 tests passed; test_file: out.txt holds 'alpha', expected 'beta'" in failed.output
    assert "2 of 2 matching rollouts (of 4)" in failed.output
    newest = CliRunner().invoke(app, ["runs", "show", "graded", "--store", url, "--version", "2", "--min-reward", "0.5"])
    assert newest.output.count("verdict pass") == 1 and "policy v2" in newest.output and "verdict fail" not in newest.output
    # piped (no terminal, no COLUMNS): the command stays on one line, no border cuts it
    assert "do echo $w >> out.txt; done" in failed.output and max(map(len, failed.output.splitlines())) > 80


def test_show_refuses_a_task_the_run_does_not_have_and_says_when_nothing_matches(tmp_path: Path) -> None:
    # Before (issue 41's trial): `--task nosuch` printed the tallies and nothing else, exit 0.
    url = str(tmp_path / "store.db")
    asyncio.run(_fill_graded(url))
    unknown = CliRunner().invoke(app, ["runs", "show", "graded", "--store", url, "--task", "nosuch"])
    assert unknown.exit_code == 2
    assert unknown.output.strip() == "error: run graded has no task 'nosuch' (its tasks: easy)"
    none = CliRunner().invoke(app, ["runs", "show", "graded", "--store", url, "--status", "aborted"])
    assert none.exit_code == 0 and "no rollout matches --status/--rollout" in none.output
