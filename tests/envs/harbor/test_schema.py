"""task.toml read with Harbor's schema as the reference (no Docker): every key of Harbor's schema
versions (``schema/``, one file per version, written here from Harbor's docs) loads; unknown keys
warn once and never refuse; keys that change grading and cannot be honoured refuse in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.envs.errors import TaskError
from gymfleet.envs.harbor.env import HarborEnv
from gymfleet.envs.harbor.task import load_task

SCHEMA = Path(__file__).resolve().parent / "schema"


def harbor_task(folder: Path, toml: str) -> Path:
    (folder / "tests").mkdir(parents=True)
    (folder / "environment").mkdir()
    (folder / "instruction.md").write_text("Do it.\n")
    (folder / "tests/test.sh").write_text("true\n")
    (folder / "environment/Dockerfile").write_text("FROM debian:bookworm\n")
    (folder / "task.toml").write_text(toml)
    return folder


@pytest.mark.parametrize("version", sorted(p.name for p in SCHEMA.glob("*.toml")))
def test_every_harbor_schema_version_loads_without_a_warning(tmp_path: Path, caplog, version: str) -> None:
    # before: network_mode, allowed_hosts, os, [environment.env], image_name, environment_mode,
    # [[verifier.collect]] were refused ("extra inputs are not permitted")
    with caplog.at_level("WARNING", logger="gymfleet.envs.harbor.task"):
        task = load_task(harbor_task(tmp_path / "t", (SCHEMA / version).read_text()))
    assert task.refusal is None and task.unknown_keys == [] and not caplog.records, caplog.records


def test_the_keys_harbor_knows_are_mapped_or_explained(tmp_path: Path) -> None:
    task = load_task(harbor_task(tmp_path / "t", (SCHEMA / "v1.3.toml").read_text()))
    # [environment.env] reaches the container; a host variable without a default does not
    assert task.env == {"GREETING": "hello", "MODE": "fast"}
    assert task.solution_env == {"SOLVER": "oracle"} and task.allow_internet is True
    assert any(n.startswith("network:") for n in task.notes) and any("API_KEY" in n for n in task.notes)
    assert any(n.startswith("artifacts:") for n in task.notes) and any(n.startswith("image:") for n in task.notes)
    offline = load_task(harbor_task(tmp_path / "o", (SCHEMA / "v1.4.toml").read_text()))
    assert offline.allow_internet is False and offline.env == {}
    tb2 = load_task(harbor_task(tmp_path / "tb2", (SCHEMA / "v1.0-tb2.toml").read_text()))
    assert (tb2.memory_mb, tb2.storage_mb, tb2.verifier_timeout_s) == (2048, 10240, 900.0)


def test_the_container_env_and_solution_env_reach_the_sandbox_and_the_oracle(tmp_path: Path) -> None:
    folder = harbor_task(tmp_path / "t", (SCHEMA / "v1.3.toml").read_text())
    (folder / "solution").mkdir()
    (folder / "solution/solve.sh").write_text("echo $SOLVER\n")
    env = HarborEnv(sandbox="local", path=str(folder))
    gold = env.gold_actions(env.instance("t"))[0]
    assert gold.splitlines()[1] == "export SOLVER=oracle"


def test_unknown_keys_warn_once_and_never_refuse(tmp_path: Path, caplog) -> None:
    toml = "[verifier]\ntimeout_sec = 5\ntimeout_secs = 9\n[environment]\nfancy = true\n[future_section]\nx = 1\n"
    with caplog.at_level("WARNING", logger="gymfleet.envs.harbor.task"):
        task = load_task(harbor_task(tmp_path / "t", toml))
    assert task.refusal is None and task.verifier_timeout_s == 5.0
    assert task.unknown_keys == ["future_section", "environment.fancy", "verifier.timeout_secs"]
    assert len(caplog.records) == 1 and "verifier.timeout_secs" in caplog.records[0].getMessage()


@pytest.mark.parametrize(("toml", "named"), [
    ('[verifier]\nenvironment_mode = "separate"\n', "verifier.environment_mode = 'separate'"),
    ('[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n', "[[steps]] (2 steps"),
    ('[environment]\nos = "windows"\n', "environment.os = 'windows'"),
    ("[environment]\ngpus = 1\n", "environment.gpus = 1"),
    ('[environment]\nmcp_servers = [{name = "x", transport = "stdio", command = "x"}]\n', "environment.mcp_servers"),
])
def test_keys_that_change_grading_are_refused_in_one_line(tmp_path: Path, toml: str, named: str) -> None:
    task = load_task(harbor_task(tmp_path / "t", toml))
    assert task.refusal is not None and named in task.refusal and "\n" not in task.refusal


@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_a_cpu_count_that_is_not_finite_and_positive_is_one_line(tmp_path: Path, value: str) -> None:
    # cpus = inf loaded and then crashed the sandbox start with a raw OverflowError
    with pytest.raises(TaskError, match="environment.cpus") as caught:
        load_task(harbor_task(tmp_path / "t", f"[environment]\ncpus = {value}\n"))
    assert "\n" not in str(caught.value)


def test_asking_for_a_task_skipped_as_invalid_says_why(tmp_path: Path) -> None:
    # before: "unknown HarborEnv instance 'bad'", as if the folder were not there
    harbor_task(tmp_path / "good", "")
    harbor_task(tmp_path / "bad", '[verifier]\ntimeout_sec = "soon"\n')
    env = HarborEnv(sandbox="local", path=str(tmp_path))
    with pytest.raises(TaskError, match=r"task 'bad' was skipped as invalid: task.toml does not validate: verifier.timeout_sec"):
        env.instance("bad")
    with pytest.raises(KeyError, match="unknown"):
        env.instance("nope")


def test_cpus_inf_at_the_command_line_is_one_line_and_exit_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gymfleet.cli import app

    folder = harbor_task(tmp_path / "t", "[environment]\ncpus = inf\n")
    result = CliRunner().invoke(app, ["rollout", "--env", "gymfleet/Harbor-v0", "--env-arg", f"path={folder}",
                                      "--env-arg", "sandbox=docker"])
    assert result.exit_code == 2 and "environment.cpus" in result.output and "Traceback" not in result.output
