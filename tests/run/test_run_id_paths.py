"""A run id names folders under runs/: one that would leave them is refused in one line (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gymfleet.cli import app


@pytest.mark.parametrize("run_id", ["..", ".", "a/../..", "../x"])
def test_a_run_id_outside_runs_is_refused_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             run_id: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    config = work / "run.yaml"
    config.write_text(yaml.safe_dump({
        "run_id": "fine", "policy": {"kind": "import", "factory": "tests.orchestrator.fakes:echo_gateway"},
        "tasks": [{"name": "echo", "env_id": "tests.orchestrator.fakes:gymfleet-test/SlowEcho-v0",
                   "env_kwargs": {"n_instances": 1}, "group_size": 1}],
    }))
    monkeypatch.chdir(work)
    result = CliRunner().invoke(app, ["collect", str(config), "--no-progress", "--run-id", run_id])
    assert result.exit_code == 2, result.output
    assert "run_id" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert sorted(p.name for p in work.iterdir()) == ["run.yaml"]
