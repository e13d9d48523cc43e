"""A task that is any URL plus a reward function, registered under its own id."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymfleet.envs import registry
from gymfleet.envs.base import ConstantPolicy
from gymfleet.envs.browser.gold import GoldPolicy
from gymfleet.envs.browser.page_text import PageView
from gymfleet.envs.browser.tasks import TaskOutcome, UrlTask, register_url_task
from gymfleet.envs.episode import run_episode

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

PAGE = """<html><head><title>Sign up</title></head><body>
<label for="name">Name</label><input id="name">
<button onclick="document.title = 'Welcome ' + document.getElementById('name').value">Sign up</button>
</body></html>"""


async def signed_up_as_alice(page) -> TaskOutcome:
    title = await page.title()
    done = title.startswith("Welcome")
    return TaskOutcome(reward=float(title == "Welcome alice"), done=done, reason=title)


def solve(view: PageView, turn: int) -> str:
    field, button = view.find("textbox", "Name")[0], view.find("button", "Sign up")[0]
    return f'fill({field.id}, "alice")' if field.value != "alice" else f"click({button.id})"


@pytest.fixture(scope="module")
def signup_env_id(tmp_path_factory) -> str:
    page = Path(tmp_path_factory.mktemp("site")) / "signup.html"
    page.write_text(PAGE)
    task = UrlTask(
        name="signup",
        url=page.as_uri(),
        instruction="Sign up with the name alice.",
        reward_fn=signed_up_as_alice,
        gold=lambda: GoldPolicy("signup", solve),
    )
    register_url_task("gymfleet-test/Signup-v0", task, max_turns=4)
    return "gymfleet-test/Signup-v0"


async def test_url_task_gold_earns_one_and_noop_zero(signup_env_id: str, browser_host) -> None:
    env = registry.make_agent_env(signup_env_id, host=browser_host)
    try:
        obs, info = await env.reset_async(seed=0)
        assert obs.startswith("Task: Sign up with the name alice.") and info["instance_id"] == "signup"
        gold = await run_episode(env, env.gold_policy(), instance_id="signup")
        noop = await run_episode(env, ConstantPolicy(env.noop_action), instance_id="signup")
    finally:
        await env.close_async()
    assert gold.reward == 1.0 and gold.terminated and len(gold.turns) == 2
    assert gold.info["reason"] == "Welcome alice"
    assert noop.reward == 0.0 and noop.truncated and len(noop.turns) == 4
