"""SlidesEnv end to end on the real local sandbox and Chromium: gold, no-op, render, bad turns, CLI."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gymfleet.cli import app
from gymfleet.envs.base import ConstantPolicy
from gymfleet.envs.episode import run_episode
from gymfleet.envs.registry import list_envs, make_agent_env
from gymfleet.envs.slides.env import SlidesEnv

pytestmark = [pytest.mark.browser, pytest.mark.bwrap]
session_loop = pytest.mark.asyncio(loop_scope="session")
BRIEF = "phishing-awareness"


@pytest.fixture
def env(renderer, bwrap_available, tmp_path):
    return SlidesEnv(sandbox="local", renderer=renderer, runs_dir=str(tmp_path / "runs"))


@session_loop
async def test_gold_policy_scores_and_leaves_one_png_per_slide(env, tmp_path) -> None:
    await env.reset_async(options={"instance_id": BRIEF})
    episode = await run_episode(env, env.gold_policy(), instance_id=BRIEF)
    await env.close_async()
    assert episode.terminated and len(episode.turns) == 2
    assert episode.reward >= 0.9
    info = episode.info
    assert set(info["checks"]) >= {"required_points", "fits_frame", "no_hidden_text"}
    pngs = sorted(p.name for p in (tmp_path / "runs").glob("*/slide-*.png"))
    assert pngs == [f"slide-{i:02d}.png" for i in range(1, env.briefs[BRIEF].n_slides + 1)]
    assert info["volatile"]["png_dir"] in episode.turns[-1].observation


@session_loop
async def test_noop_submits_nothing_and_scores_zero(env) -> None:
    await env.reset_async(options={"instance_id": BRIEF})
    episode = await run_episode(env, ConstantPolicy(env.noop_action), instance_id=BRIEF)
    await env.close_async()
    assert episode.reward == 0.0 and episode.terminated
    assert "no deck.html" in episode.info["render_error"]


@session_loop
async def test_render_reports_what_is_hidden_then_fix_then_submit(env) -> None:
    obs, info = await env.reset_async(options={"instance_id": BRIEF})
    assert "check the sender address" in obs and "exactly 5" in obs
    deck = (
        "<html><body style='margin:0'><section class='slide' style='width:1280px;height:720px'>"
        "<h1>Phishing</h1><p style='display:none'>check the sender address</p></section></body></html>"
    )
    script = f"```bash\ncat > deck.html <<'EOF'\n{deck}\nEOF\n```"
    obs, reward, terminated, _, _ = await env.step_async(script)
    assert obs.startswith("exit code 0") and not terminated and reward == 0.0
    obs, _, terminated, _, info = await env.step_async("render")
    assert not terminated and info["volatile"]["png_dir"].endswith("render-01")
    assert "1 slide(s)" in obs and "HIDDEN: not rendered" in obs and "slide_count" in obs
    obs, _, terminated, _, info = await env.step_async("please render it")
    assert not terminated and "malformed" in info and "render" in obs
    obs, reward, terminated, _, info = await env.step_async("submit")
    assert terminated and reward < 0.5 and info["checks"]["no_hidden_text"]["score"] == 0.0
    await env.close_async()


@session_loop
async def test_unknown_brief_is_a_key_error_naming_known_ones(env) -> None:
    with pytest.raises(KeyError, match="solar-microgrids"):
        await env.reset_async(options={"instance_id": "no-such-brief"})
    await env.close_async()


def test_registered_with_twenty_briefs() -> None:
    assert "gymfleet/Slides-v0" in list_envs()
    env = make_agent_env("gymfleet/Slides-v0", sandbox="local")
    assert len(env.instance_ids()) >= 20 and env.noop_action == "submit"
    assert "<section class=\"slide\">" in env.system_prompt


def test_cli_rollout_gold_leaves_pngs(bwrap_available, chromium_path, tmp_path) -> None:
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, [
        "rollout", "--env", "gymfleet/Slides-v0", "--policy", "gold", "--instance", "river-cleanup",
        "--env-arg", "sandbox=local", "--artifacts-dir", str(runs), "--env-arg", f"chromium={chromium_path}",
    ])
    assert result.exit_code == 0, result.output
    assert "reward 1" in result.output
    assert len(list((runs / "gold").glob("river-cleanup-*/slide-*.png"))) == 5  # a folder per policy


@pytest.mark.docker
@session_loop
async def test_gold_on_a_docker_sandbox(renderer, docker_available, tmp_path) -> None:
    env = SlidesEnv(sandbox="docker", renderer=renderer, runs_dir=str(tmp_path / "runs"))
    _, info = await env.reset_async(options={"instance_id": "incident-postmortems"})
    assert info["sandbox"] == "docker" and info["isolated"]
    episode = await run_episode(env, env.gold_policy(), instance_id="incident-postmortems")
    await env.close_async()
    assert episode.reward >= 0.9
    assert len(list((tmp_path / "runs").glob("incident-postmortems-*/slide-*.png"))) == 4


@session_loop
async def test_turn_limit_scores_the_deck_as_it_stands(renderer, bwrap_available, tmp_path) -> None:
    env = SlidesEnv(sandbox="local", renderer=renderer, runs_dir=str(tmp_path / "runs"), max_turns=2)
    await env.reset_async(options={"instance_id": BRIEF})
    write = env.gold_policy().actions[0]
    _, reward, terminated, truncated, _ = await env.step_async(write)
    assert (reward, terminated, truncated) == (0.0, False, False)
    obs, reward, terminated, truncated, info = await env.step_async("render")
    assert truncated and not terminated and reward >= 0.9 and "Turn limit (2)" in obs
    await env.close_async()
