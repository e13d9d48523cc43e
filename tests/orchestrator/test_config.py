"""Run configs: the shipped examples validate, overrides apply, bad input names the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.orchestrator.config import load_run_config
from gymfleet.core.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("collect-*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_validate(path: Path) -> None:
    cfg = load_run_config(path)
    assert cfg.tasks and cfg.store.endswith(f"{cfg.run_id}/store.db")


def test_overrides_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "my-run.yaml"
    path.write_text("tasks:\n  - env_id: gymfleet/Terminal-v0\n")
    cfg = load_run_config(path, ["tasks.0.weight=2.5", "max_in_flight=3", "sampling.temperature=0"])
    assert cfg.run_id == "my-run" and cfg.max_in_flight == 3
    assert cfg.tasks[0].weight == 2.5 and cfg.tasks[0].sampling.temperature == 0
    assert cfg.tasks[0].name == "gymfleet/Terminal-v0" and cfg.store == "runs/my-run/store.db"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tasks: []", "tasks"),
        ("tasks:\n  - {env_id: a}\n  - {env_id: a}\n", "names must be unique"),
        ("tasks:\n  - {env_id: a, weight: 0}\n", "weight > 0"),
        ("tasks:\n  - {env_id: a, group_sise: 4}\n", "group_sise"),
        ("run_id: 'bad id'\ntasks:\n  - {env_id: a}\n", "run_id"),
        ("[1, 2]", "mapping"),
    ],
)
def test_bad_configs_name_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_run_config(path)


async def test_instances_come_from_the_list_a_file_or_the_env(tmp_path: Path) -> None:
    from gymfleet.orchestrator.config import TaskConfig
    from gymfleet.orchestrator.envfactory import env_factory, resolve_instances

    env_id = "tests.orchestrator.fakes:gymfleet-test/SlowEcho-v0"
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("# two of them\nw003\n\nw001  # this one too\n")
    for fields, expected in [
        ({}, ["w000", "w001", "w002"]),
        ({"instances": ["w002", "w000"]}, ["w002", "w000"]),
        ({"instances_file": str(ids_file)}, ["w003", "w001"]),
    ]:
        task = TaskConfig.model_validate({"env_id": env_id, "env_kwargs": {"n_instances": 4}, "max_instances": 3,
                                          **fields})
        assert await resolve_instances(task, env_factory(task)) == expected
    bad = TaskConfig.model_validate({"env_id": env_id, "instances": ["nope"]})
    with pytest.raises(ConfigError, match="fix `instances:`"):
        await resolve_instances(bad, env_factory(bad))


async def test_miniwob_instances_may_name_a_page_seed() -> None:
    """``click-test-2@7`` is the task on page seed 7: a config may list it (training on some seeds,
    holding out others); a seed that is not a number, or an unknown task, is refused."""
    from gymfleet.orchestrator.config import TaskConfig
    from gymfleet.orchestrator.envfactory import env_factory, resolve_instances

    task = TaskConfig.model_validate({"env_id": "gymfleet/miniwob.click-test-2-v0",
                                      "instances": ["click-test-2@7", "click-test-2@1000", "click-test-2"],
                                      "exclude_instances": ["click-test-2@1000"]})
    assert await resolve_instances(task, env_factory(task)) == ["click-test-2@7", "click-test-2"]
    for wrong in ("click-test-2@x", "click-button@3"):
        bad = task.model_copy(update={"instances": [wrong], "exclude_instances": []})
        with pytest.raises(ConfigError, match="fix `instances:`"):
            await resolve_instances(bad, env_factory(bad))
