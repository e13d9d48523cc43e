"""Hostile pages on the local Chromium: what they read of the host never reaches the observation,
a page that keeps reloading still gives observations, and text no encoder takes is cleaned.

The pages are task pages, so they run their own scripts: a click starts each attack."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymfleet.envs.browser.env import BrowserEnv
from gymfleet.envs.browser.tasks import TaskOutcome, UrlTask
from tests.envs.browser.secret_server import secret_server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

SECRET = "gymfleet-secret-" + os.urandom(6).hex()

# A click navigates the page (or fetches, or frames) the target and copies what it read into
# the page's own text when it can.
ATTACK = """<html><head><title>Attack</title></head><body>
<button onclick="go()">Go</button><p id="out">nothing</p>
<script>
const target = TARGET;
function go() {
  if (HOW === 'navigate') { location.href = target; return; }
  if (HOW === 'frame') { const f = document.createElement('iframe'); f.src = target;
    f.onload = () => { try { out.textContent = f.contentDocument.body.innerText; } catch (e) {} };
    document.body.appendChild(f); return; }
  fetch(target).then(r => r.text()).then(t => { out.textContent = t; }).catch(e => { out.textContent = 'refused'; });
}
</script></body></html>"""

RELOADER = """<html><head><title>Reload</title></head><body><button>Stay</button><p>tick</p>
<script>setTimeout(() => location.reload(), 15);</script></body></html>"""

SURROGATE = """<html><head><title>Odd</title></head><body>
<button id="b">Press</button><p id="p"></p>
<script>document.getElementById('p').textContent = 'half ' + String.fromCharCode(0xD800) + ' pair';
document.getElementById('b').textContent = 'Press' + String.fromCharCode(0xDC00);</script>
</body></html>"""


async def never_done(page) -> TaskOutcome:
    return TaskOutcome(reward=0.0, done=False, reason="")


def button_id(obs: str, name: str) -> int:
    match = re.search(rf'\[(\d+)\] button "{name}', obs)
    assert match, obs
    return int(match.group(1))


@pytest.fixture(scope="module")
def secret_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Host files a page must never show: one readable (0644, outside the pages' folder), one
    0600; and /etc/shadow and /root where they exist."""
    root = Path(tmp_path_factory.mktemp("host-secrets"))
    files = {"readable": root / "readable.txt", "private": root / "private.txt"}
    for path in files.values():
        path.write_text(SECRET + "\n")
    files["private"].chmod(0o600)
    return files


@pytest.fixture(scope="module")
def other_origin() -> Iterator[str]:
    """An HTTP server on another origin (127.0.0.1) serving the secret, CORS open to all."""
    with secret_server(SECRET.encode(), {"Access-Control-Allow-Origin": "*"}) as url:
        yield f"{url}/secret"


def attack_page(folder: Path, how: str, target: str) -> str:
    name = f"{how}-{abs(hash(target))}.html"
    (folder / name).write_text(ATTACK.replace("TARGET", json.dumps(target)).replace("HOW", json.dumps(how)))
    return (folder / name).as_uri()


@pytest.fixture(scope="module")
def pages_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tmp_path_factory.mktemp("pages"))


def targets(secret_files: dict[str, Path], other_origin: str) -> list[tuple[str, str]]:
    found = [("readable", secret_files["readable"].as_uri()), ("private", secret_files["private"].as_uri()),
             ("other-origin", other_origin), ("root", "file:///root/")]
    if Path("/etc/shadow").exists():
        found.append(("shadow", "file:///etc/shadow"))
    return found


@pytest.mark.parametrize("how", ["navigate", "frame", "fetch"])
async def test_host_files_and_other_origins_never_reach_the_observation(
    browser_host, pages_dir: Path, secret_files: dict[str, Path], other_origin: str, how: str
) -> None:
    shadow = Path("/etc/shadow").read_text() if os.access("/etc/shadow", os.R_OK) else ""
    shadow_line = next((line for line in shadow.splitlines() if line.startswith("root:")), "")
    for what, target in targets(secret_files, other_origin):
        task = UrlTask(f"{how}-{what}", attack_page(pages_dir, how, target), "Press Go.", never_done)
        env = BrowserEnv(host=browser_host, tasks=[task], max_turns=3)
        try:
            obs, _ = await env.reset_async()
            obs, *_ = await env.step_async(f"click({button_id(obs, 'Go')})")
            obs, *_, info = await env.step_async("noop()")  # whatever loaded has loaded now
            seen = obs + json.dumps(info)
            assert SECRET not in seen, (what, obs)
            assert not shadow_line or shadow_line not in seen, (what, obs)
            assert "Index of /root" not in seen and "Parent Directory" not in seen, (what, obs)
        finally:
            await env.close_async()


async def test_a_page_reloading_in_a_loop_still_gives_observations(browser_host, pages_dir: Path) -> None:
    (pages_dir / "reload.html").write_text(RELOADER)
    task = UrlTask("reload", (pages_dir / "reload.html").as_uri(), "Press Stay.", never_done)
    env = BrowserEnv(host=browser_host, tasks=[task], max_turns=15, step_timeout_s=60.0)
    try:
        await env.reset_async()
        for _ in range(15):  # before: 6 of 15 raised "Execution context was destroyed"
            obs, _, terminated, truncated, _ = await env.step_async("noop()")
            assert "Page:" in obs
            if terminated or truncated:
                break
    finally:
        await env.close_async()


async def test_a_lone_surrogate_is_cleaned_and_the_context_closed(browser_host, pages_dir: Path) -> None:
    (pages_dir / "surrogate.html").write_text(SURROGATE)
    task = UrlTask("surrogate", (pages_dir / "surrogate.html").as_uri(), "Press.", never_done)
    env = BrowserEnv(host=browser_host, tasks=[task], max_turns=2)
    before = len((await browser_host.start()).contexts)
    try:
        obs, info = await env.reset_async()
        obs.encode("utf-8")  # before: UnicodeEncodeError (surrogates not allowed)
        json.dumps(info).encode("utf-8")
        assert "half \ufffd pair" in obs, obs
        obs, _, _, truncated, info = await env.step_async(f"click({button_id(obs, 'Press')})")
        obs.encode("utf-8")
        obs, _, _, truncated, info = await env.step_async("noop()")
        assert truncated
    finally:
        await env.close_async()
    assert len((await browser_host.start()).contexts) == before
