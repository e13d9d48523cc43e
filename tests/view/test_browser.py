"""The viewer in real Chromium (Playwright, the project's Debian Chromium), over real SQLite stores
served by a real uvicorn: one finished run with a real MiniWoB episode's screenshots and a
hostile trajectory, one live run that grows while a page follows it. One Chromium for the module."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import pytest_asyncio
import uvicorn

from gymfleet.core.records import RolloutStatus
from gymfleet.envs.base import AgentEnv
from gymfleet.envs.episode import run_episode
from gymfleet.envs.registry import make_agent_env
from gymfleet.orchestrator.store import GroupSpec, TrajectoryStore
from gymfleet.orchestrator.store.codec import json_safe
from gymfleet.orchestrator.store.schema import RunStatus
from gymfleet.view import StoreSet, create_app
from gymfleet.view.tokens import IdsOnly
from tests.view.conftest import free_port, write_learner_log
from tests.view.synthetic import Turn, fill_run, trajectory

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

HOSTILE = [
    Turn('<script>window.__pwned = "script"</script>', '<img src="x" onerror="window.__pwned = \'img\'">'),
    Turn('[click me](javascript:window.__pwned="md")', '<a href="javascript:window.__pwned=\'a\'">link</a>'
         '<svg onload="window.__pwned=\'svg\'"></svg><iframe src="javascript:alert(1)"></iframe>'),
]
MINIWOB = "gymfleet/miniwob.click-test-2-v0"


@dataclass
class Site:
    url: str
    runs_dir: Path
    browser: Any
    live: TrajectoryStore
    miniwob_id: str
    hostile_id: str
    miniwob_group: str
    n_screenshots: int


async def _miniwob_episode(chromium_path: str, shots: Path) -> tuple[Any, AgentEnv]:
    env = make_agent_env(MINIWOB, screenshots_dir=str(shots), chromium={"executable_path": chromium_path})
    try:
        instance = "click-test-2@3"
        return await run_episode(env, env.gold_policy(instance), env_id=MINIWOB, instance_id=instance, max_turns=3), env
    finally:
        await env.close_async()


async def _finished_run(runs_dir: Path, chromium_path: str) -> tuple[str, str, str, int]:
    run_dir = runs_dir / "finished"
    shots = run_dir / "screenshots"
    config = {"run_id": "finished", "tasks": [{"name": "miniwob", "env_id": MINIWOB,
                                               "env_kwargs": {"screenshots_dir": str(shots)}}]}
    episode, env = await _miniwob_episode(chromium_path, shots)
    async with await TrajectoryStore.open(str(run_dir / "store.db")) as store:
        await fill_run(store, "finished", 6, config=config)
        group = GroupSpec("finished/miniwob/p9/click-test-2@3", "finished", "miniwob", MINIWOB, "click-test-2@3", 2)
        store.create_group(group)
        turns = [Turn(t.action, t.observation) for t in episode.turns]
        real = trajectory("finished", group.group_id, 0, env_id=MINIWOB, instance_id="click-test-2@3", version=3,
                          reward=episode.reward, turns=turns, system=env.system_prompt, prompt=episode.first_observation,
                          metrics=json_safe(episode.info))
        hostile = trajectory("finished", group.group_id, 1, env_id=MINIWOB, instance_id="click-test-2@3", version=3,
                             reward=0.0, turns=HOSTILE, status=RolloutStatus.policy_error,
                             reason='<img src=x onerror="window.__pwned=\'reason\'">',
                             metrics={"screenshot_path": "javascript:alert(1)", "patch": "<script>window.__pwned='patch'</script>"})
        for traj, sample_id in zip((real, hostile), group.sample_ids()):
            store.start_sample(sample_id, traj.rollout_id)
            store.add(traj, sample_id=sample_id, task="miniwob")
        await store.flush()
        await store.set_run_status("finished", RunStatus.completed)
    write_learner_log(run_dir / "report", 5)
    n_shots = len(list(Path(episode.info["screenshot_path"]).parent.glob("turn-*.png")))
    shutil.copy(episode.info["screenshot_path"], run_dir / "report" / "reward.png")  # a PNG in the report's place
    (run_dir / "report" / "escape.png").symlink_to("/etc/passwd")
    return real.rollout_id, hostile.rollout_id, group.group_id, n_shots


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site(chromium_path: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Site]:
    from playwright.async_api import async_playwright

    runs_dir = tmp_path_factory.mktemp("runs")
    real_id, hostile_id, group_id, n_shots = await _finished_run(runs_dir, chromium_path)
    live = await TrajectoryStore.open(str(runs_dir / "live" / "store.db"))
    await fill_run(live, "live", 3, seed=1)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(StoreSet(None, runs_dir), IdsOnly()), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        await asyncio.sleep(0.05)
    playwright = await async_playwright().start()
    browser = await playwright.chromium.launch(executable_path=chromium_path, args=["--no-sandbox", "--headless"])
    try:
        yield Site(f"http://127.0.0.1:{port}", runs_dir, browser, live, real_id, hostile_id, group_id, n_shots)
    finally:
        await browser.close()
        await playwright.stop()
        server.should_exit = True
        thread.join(timeout=10)
        await live.close()


async def _open(site: Site, path: str) -> Any:
    page = await site.browser.new_page()
    page.dialogs = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), asyncio.ensure_future(d.dismiss())))
    await page.goto(site.url + path)
    await page.wait_for_selector("body[data-ready]", timeout=15_000)
    assert await page.get_attribute("body", "data-ready") == "1", await page.inner_text("main")
    return page


async def test_the_runs_page_lists_the_finished_and_the_live_run(site: Site) -> None:
    page = await _open(site, "/")
    text = await page.inner_text("#runs")
    assert "finished" in text and "completed" in text and "report" in text
    assert "live" in text and "running" in text
    await page.click("#runs a:text-is('finished') >> nth=0")
    await page.wait_for_selector("#rewards")
    assert await page.locator("#rewards tbody tr").count() == 2  # terminal and miniwob
    assert await page.locator("#steps tbody tr").count() == 5
    report = page.locator("#report img")
    assert await report.count() == 1  # reward.png; escape.png leads out of the folder and is not listed
    assert await report.first.evaluate("img => img.complete && img.naturalWidth") > 0
    await page.close()


async def test_a_trajectory_page_shows_turns_token_masks_and_the_miniwob_screenshots(site: Site) -> None:
    page = await _open(site, f"/run/finished/trajectory?id={quote(site.miniwob_id)}")
    detail = httpx.get(f"{site.url}/api/runs/finished/trajectory", params={"id": site.miniwob_id}).json()
    assert await page.locator("#turns .turn").count() == len(detail["messages"])
    assert "click" in (await page.inner_text("#turns")).lower()
    generated, env_tokens = page.locator("#tokens .tok.m1"), page.locator("#tokens .tok.m0")
    assert await generated.count() == sum(detail["loss_mask"]) > 0
    assert await env_tokens.count() == len(detail["loss_mask"]) - sum(detail["loss_mask"])
    assert "policy v3" in await generated.first.get_attribute("title")
    assert "not trained" in await env_tokens.first.get_attribute("title")
    shots = page.locator("#shots img.screenshot")
    assert await shots.count() == site.n_screenshots >= 2  # after reset and after the click
    widths = await shots.evaluate_all("imgs => imgs.map(i => i.complete && i.naturalWidth)")
    assert all(w and w > 100 for w in widths), widths
    await page.close()


async def test_a_group_page_shows_its_samples_side_by_side(site: Site) -> None:
    page = await _open(site, f"/run/finished/groups")
    assert await page.locator("#groups .group").count() == 7
    await page.goto(f"{site.url}/run/finished/group?id={quote(site.miniwob_group)}")
    await page.wait_for_selector("#samples .sample")
    samples = page.locator("#samples .sample")
    assert await samples.count() == 2
    advantages = await page.locator("#samples .adv").all_inner_texts()
    assert advantages == ["+1.00", "-1.00"]  # rewards 1 and 0: (r - 0.5) / (0.5 + 1e-6)
    await page.close()


async def test_a_live_run_shows_new_rollouts_without_reload(site: Site) -> None:
    page = await _open(site, "/run/live/trajectories")
    before = await page.locator("#rows tr").count()
    await page.evaluate("window.__same_page = true")
    await fill_run_more(site.live)
    await page.locator("#rows tr").nth(before + 7).wait_for(timeout=15_000)  # polled every 2 s by the page
    assert await page.locator("#rows tr").count() == before + 8
    assert await page.evaluate("window.__same_page") is True  # no reload happened
    assert await page.locator("#rows tr.fresh").count() == 8
    await page.close()


async def fill_run_more(store: TrajectoryStore) -> None:
    from tests.view.synthetic import TASKS, _sample
    import random

    rng = random.Random(7)
    for g in range(2):
        task, env_id = TASKS[g]
        group = GroupSpec(f"live/{task}/p1/extra-{g}", "live", task, env_id, f"extra-{g}", 4)
        store.create_group(group)
        for i, sample_id in enumerate(group.sample_ids()):
            traj = _sample(rng, "live", group, i, 7, 8)
            store.start_sample(sample_id, traj.rollout_id)
            store.add(traj, sample_id=sample_id, task=task)
    await store.flush()


async def test_hostile_trajectory_text_runs_nothing_and_is_shown_as_text(site: Site) -> None:
    for path in (f"/run/finished/trajectory?id={quote(site.hostile_id)}",
                 f"/run/finished/group?id={quote(site.miniwob_group)}",
                 "/run/finished/trajectories?text=" + quote("<script>")):
        page = await _open(site, path)
        await page.wait_for_timeout(300)  # an onerror or a timer would have fired by now
        assert await page.evaluate("window.__pwned") is None, path
        assert page.dialogs == [], path
        assert await page.evaluate("[...document.scripts].map(s => s.src)") == [f"{site.url}/static/view.js"]
        assert await page.evaluate("document.querySelectorAll('[onerror],[onload],iframe,svg [onload]').length") == 0
        hrefs = await page.evaluate("[...document.querySelectorAll('a')].map(a => a.getAttribute('href'))")
        assert not [h for h in hrefs if not h.startswith("/")], hrefs
        if "trajectory?" in path:
            shown = await page.inner_text("#turns")
            assert '<script>window.__pwned = "script"</script>' in shown
            assert '<img src="x" onerror=' in shown
            assert "<script>window.__pwned='patch'</script>" in await page.inner_text("#patch")
            assert "not served" in await page.inner_text("#shots")  # javascript:alert(1) named, never linked
        if "trajectories?" in path:
            assert await page.locator("#rows tr").count() == 1  # the search found the hostile one, as text
        await page.close()


async def test_files_come_only_from_the_run_s_own_folders(site: Site) -> None:
    api = f"{site.url}/api/runs/finished/file"
    shot = httpx.get(f"{site.url}/api/runs/finished/trajectory", params={"id": site.miniwob_id}).json()
    ref = shot["artifacts"]["files"][0]["ref"]
    ok = httpx.get(api, params=ref)
    assert ok.status_code == 200 and ok.headers["content-type"] == "image/png" and ok.content[:4] == b"\x89PNG"
    assert "sandbox" in ok.headers["content-security-policy"] and ok.headers["x-content-type-options"] == "nosniff"
    for root, path in [("run", "../../etc/passwd"), ("run", "../../../../../../etc/passwd"), ("report", "/etc/passwd"),
                       ("run", "screenshots/../../../etc/passwd"), ("report", "escape.png"), ("run", "store.db"),
                       ("/etc", "passwd"), ("run", "..\\..\\etc\\passwd")]:
        refused = httpx.get(api, params={"root": root, "path": path})
        assert refused.status_code == 403, (root, path, refused.status_code)
        assert "root:" not in refused.text
    raw = httpx.get(f"{site.url}/api/runs/finished/file?root=run&path=..%2F..%2F..%2Fetc%2Fpasswd")
    assert raw.status_code == 403
    assert httpx.post(api, params=ref).status_code == 405  # read-only: GET and HEAD only
