"""open_run composes a run: shared env resources handed to every env, tasks whose needs this
machine lacks left out with a message, the scheduler over the store and the policy, the plain
progress lines when output is not a terminal."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from gymfleet.core.errors import ConfigError
from gymfleet.envs.resources import EnvResources
from gymfleet.orchestrator.store.schema import RunStatus
from gymfleet.run import open_run
from tests.orchestrator.conftest import run_config
from tests.orchestrator.fakes import ScriptedGateway
from tests.orchestrator.test_env_resources import terminal_gold, terminal_task


def gold_gateway() -> ScriptedGateway:
    """A policy that plays the terminal tasks' gold solutions (``policy.factory`` of the runs below)."""
    return ScriptedGateway(terminal_gold)


def _config(tmp_path: Path, tasks: list[dict]) -> object:
    return run_config(tmp_path, tasks, max_in_flight=2,
                      policy={"kind": "import", "factory": "tests.run.test_open_run:gold_gateway"},
                      resources={"sandbox": "local", "local": {"state_dir": str(tmp_path / "sandboxes")}})


@pytest.mark.bwrap
async def test_open_run_shares_resources_and_leaves_out_what_cannot_run(
    bwrap_available: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYMFLEET_CHROMIUM", str(tmp_path / "no-chromium"))
    cfg = _config(tmp_path, [terminal_task(instances=["permissions"], group_size=2),
                             {"name": "web", "env_id": "gymfleet/miniwob.click-test-2-v0"}])
    out = io.StringIO()
    async with open_run(cfg, console=Console(file=out, width=200)) as run:
        assert isinstance(run.resources, EnvResources)
        assert [t.name for t in run.config.tasks] == ["term"] and list(run.instances) == ["term"]
        assert "Chromium" in run.left_out["web"]
        env = run.factories["term"]()
        try:
            assert env.resources is run.resources  # every env gets the run's shared resources
        finally:
            await env.close_async()
        with run.progress(live=False, interval_s=0.05):
            outcome = await run.scheduler.run()
        usage = run.resources.usage()
    assert outcome.status is RunStatus.completed and outcome.by_status == {"ok": 2}
    assert usage.sandboxes_started + usage.sandboxes_reused == 2
    text = out.getvalue()
    assert "task web left out: no Chromium" in text
    assert "[r1 " in text and "rollouts 2 done (ok=2)" in text and "reward 1.000" in text


async def test_no_runnable_task_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYMFLEET_CHROMIUM", str(tmp_path / "no-chromium"))
    cfg = _config(tmp_path, [{"name": "web", "env_id": "gymfleet/miniwob.click-test-2-v0"}])
    with pytest.raises(ConfigError, match="no task of run r1 can run here: web: no Chromium"):
        async with open_run(cfg, console=Console(file=io.StringIO())):
            pass


async def test_env_kwargs_the_env_refuses_are_a_config_error(tmp_path: Path) -> None:
    cfg = _config(tmp_path, [terminal_task(env_kwargs={"sandbx": "local"})])
    with pytest.raises(ConfigError, match=r"^task term: env_kwargs: unknown key 'sandbx': did you mean 'sandbox'\?$"):
        async with open_run(cfg, console=Console(file=io.StringIO())):
            pass
