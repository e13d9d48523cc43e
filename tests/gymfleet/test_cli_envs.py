"""`gymfleet rollout` on bad input: a clear one-line error and exit code 2, never a traceback."""

from __future__ import annotations

import gymnasium
import pytest
from typer.testing import CliRunner

from gymfleet.cli import app

ECHO_ID = "gymfleettest/Echo-v0"


@pytest.fixture(autouse=True)
def echo_registered():
    if ECHO_ID not in gymnasium.registry:
        gymnasium.register(ECHO_ID, entry_point="tests.fakes:EchoEnv")
    yield


def _rollout(*args: str):
    return CliRunner().invoke(app, ["rollout", "--env", *args])


def test_rollout_plays_the_gold_policy() -> None:
    result = _rollout(ECHO_ID, "--instance", "beta")
    assert result.exit_code == 0, result.output
    assert "reward 1" in result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((ECHO_ID, "--instance", "gamma"), "error: gamma"),
        (("gymfleettest/Ecko-v0",), "unknown env id"),
        ((ECHO_ID, "--env-arg", "words"), "is not KEY=VALUE"),
        (("gymfleet/Terminal-v0", "--env-arg", "colour=red"), "error: 1 validation error for TerminalEnvConfig"),
    ],
)
def test_rollout_bad_input_is_a_clear_error(args: tuple[str, ...], expected: str) -> None:
    result = _rollout(*args)
    assert result.exit_code == 2, result.output
    assert expected in result.output
    assert isinstance(result.exception, SystemExit)  # typer.Exit, not an uncaught exception



def test_rollout_says_where_it_wrote_its_pngs(tmp_path) -> None:
    picture_id = "gymfleettest/PictureEcho-v0"
    if picture_id not in gymnasium.registry:
        gymnasium.register(picture_id, entry_point="tests.fakes:PictureEchoEnv")
    result = _rollout(picture_id, "--n", "2", "--artifacts-dir", str(tmp_path / "pics"))
    assert result.exit_code == 0, result.output
    output = result.output.replace("\n", "")
    assert f"wrote 2 PNGs under {tmp_path / 'pics' / 'gold'}" in output
    assert str(tmp_path / "pics" / "gold" / "alpha") in output and str(tmp_path / "pics" / "gold" / "beta") in output
    # Before: a no-op rollout of the same instances erased the gold rollout's PNGs.
    gold = sorted((tmp_path / "pics" / "gold").rglob("*.png"))
    result = _rollout(picture_id, "--n", "2", "--policy", "noop", "--artifacts-dir", str(tmp_path / "pics"))
    assert result.exit_code == 0, result.output
    assert sorted((tmp_path / "pics" / "gold").rglob("*.png")) == gold and gold
    assert list((tmp_path / "pics" / "noop").rglob("*.png"))


def test_rollout_json_is_pure_json_lines() -> None:
    # Before: the summary table followed the JSON on stdout (`| jq` broke).
    result = _rollout(ECHO_ID, "--n", "2", "--json")
    assert result.exit_code == 0, result.output
    import json

    episodes = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(episodes) == 2 and all(e["reward"] == 1 for e in episodes)
    assert "instance" in result.stderr  # the summary table, on stderr


def test_a_long_check_is_never_silent() -> None:
    # Before: `envs check gymfleet/Harbor-v0` printed nothing for about three minutes of image builds.
    import io
    import time

    from rich.console import Console

    from gymfleet.cli.envs import Heartbeat

    out = io.StringIO()
    with Heartbeat(Console(file=out, width=200), "envs check x/Slow-v0", every_s=0.05):
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and all(line.startswith("envs check x/Slow-v0: still running after") for line in lines)
