"""Takes the screenshots of ``docs/view.md``: the viewer's pages in real Chromium over a demo runs folder.

The demo: a finished training-like run (synthetic groups written through the real store, one
real MiniWoB episode played by its gold policy with screenshots, its tokens from the embedded
model's tokenizer, a learner log and the real report PNGs from ``gymfleet.run.report``) and a
live run with rollouts in flight. Prints the PNGs written as JSON.

Usage: ``python scripts/view_screenshots.py [--out docs/view]`` (needs Chromium: ``GYMFLEET_CHROMIUM``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import quote

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gymfleet.core.models import load_tokenizer  # noqa: E402
from gymfleet.envs.browser.chromium import ChromiumConfig  # noqa: E402
from gymfleet.envs.episode import run_episode  # noqa: E402
from gymfleet.envs.registry import make_agent_env  # noqa: E402
from gymfleet.orchestrator.store import GroupSpec, TrajectoryStore  # noqa: E402
from gymfleet.orchestrator.store.codec import json_safe  # noqa: E402
from gymfleet.orchestrator.store.schema import RunStatus  # noqa: E402
from gymfleet.run.records import GenerationTimeline  # noqa: E402
from gymfleet.run.report import build_report, write_report  # noqa: E402
from gymfleet.view import StoreSet, create_app  # noqa: E402
from gymfleet.view.tokens import RunTokenizer  # noqa: E402
from tests.view.conftest import free_port  # noqa: E402
from tests.view.synthetic import Turn, fill_run, trajectory  # noqa: E402

MINIWOB = "gymfleet/miniwob.click-test-2-v0"
RUN = "train-demo"


def learner_log(report_dir: Path, n_steps: int) -> None:
    report_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"event": "start", "t": 0.0, "step": 0, "version": 1, "resumed": False}]
    for i in range(1, n_steps + 1):
        reward = {"terminal": min(0.9, 0.3 + 0.05 * i), "miniwob": min(0.95, 0.5 + 0.04 * i)}
        rows.append({"event": "step", "t": 8.0 * i, "step": i, "loss": 0.08 / i ** 0.5, "masked_fraction": 0.01 * (i % 3),
                     "mean_ratio": 1.0, "kl": 0.001 * i, "n_tokens": 1800, "n_groups": 2,
                     "mean_reward": sum(reward.values()) / 2, "idle_s": 1.0, "duration_s": 6.5, "published_version": i + 1,
                     "reward_by_task": reward, "version": i + 1, "filter": {"staleness": [0, 1, 1, 2, 0, 0, 1, 0]}})
    (report_dir / "learner.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


async def demo(runs: Path) -> tuple[str, str]:
    shots = runs / RUN / "screenshots"
    config = {"run_id": RUN, "policy": {"model": "embedded"},
              "tasks": [{"name": "terminal", "env_id": "gymfleet/TerminalEasy-v0"},
                        {"name": "miniwob", "env_id": MINIWOB, "env_kwargs": {"screenshots_dir": str(shots)}}]}
    env = make_agent_env(MINIWOB, screenshots_dir=str(shots), chromium=ChromiumConfig())
    try:
        episode = await run_episode(env, env.gold_policy("click-test-2@5"), env_id=MINIWOB, instance_id="click-test-2@5")
        system = env.system_prompt
    finally:
        await env.close_async()
    tokenizer = load_tokenizer()
    async with await TrajectoryStore.open(str(runs / RUN / "store.db")) as store:
        await fill_run(store, RUN, 60, config=config, observation_chars=200)
        group = GroupSpec(f"{RUN}/miniwob/p1/click-test-2@5", RUN, "miniwob", MINIWOB, "click-test-2@5", 4)
        store.create_group(group)
        wrong = [Turn('click(text="TWO")', "Clicked the wrong button. The episode is over.")]
        right = [Turn(t.action, t.observation) for t in episode.turns]
        for i, (turns, reward) in enumerate([(right, episode.reward), (wrong, 0.0), (right, episode.reward), (wrong, 0.0)]):
            traj = trajectory(RUN, group.group_id, i, env_id=MINIWOB, instance_id="click-test-2@5", version=7,
                              reward=reward, turns=turns, system=system, prompt=episode.first_observation,
                              metrics=json_safe(episode.info) if i == 0 else {"raw_reward": -1.0}, seed=i,
                              encode=lambda text: tokenizer.encode(text, add_special_tokens=False))
            store.start_sample(group.sample_ids()[i], traj.rollout_id)
            store.add(traj, sample_id=group.sample_ids()[i], task="miniwob")
        await store.flush()
        await store.set_run_status(RUN, RunStatus.completed_budget)
    learner_log(runs / RUN / "report", 12)
    write_report(runs / RUN / "report", build_report(runs / RUN / "report", "async", GenerationTimeline(0.0, 100.0), RUN))
    async with await TrajectoryStore.open(str(runs / "collect-live" / "store.db")) as store:
        await fill_run(store, "collect-live", 10, seed=2)
        extra = GroupSpec("collect-live/terminal/p1/write-word-ember", "collect-live", "terminal",
                          "gymfleet/TerminalEasy-v0", "write-word-ember", 4)
        store.create_group(extra)
        for i, sample_id in enumerate(extra.sample_ids()):
            store.start_sample(sample_id, f"{sample_id}/a1")
        await store.flush()
    return group.group_id, f"{group.group_id}/0/a1"


async def shoot(out: Path) -> list[str]:
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        group_id, rollout_id = await demo(runs)
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(StoreSet(None, runs), RunTokenizer()), host="127.0.0.1",
                                               port=port, log_level="warning"))
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            await asyncio.sleep(0.05)
        pages = {"runs": "/", "run": f"/run/{RUN}", "trajectories": f"/run/{RUN}/trajectories?task=miniwob",
                 "groups": f"/run/{RUN}/groups", "group": f"/run/{RUN}/group?id={quote(group_id)}",
                 "trajectory": f"/run/{RUN}/trajectory?id={quote(rollout_id)}"}
        written = []
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=ChromiumConfig().executable_path, args=["--no-sandbox"])
            page = await browser.new_page(viewport={"width": 1280, "height": 860})
            for name, path in pages.items():
                await page.goto(f"http://127.0.0.1:{port}{path}")
                await page.wait_for_selector("body[data-ready]", timeout=60_000)
                await page.wait_for_timeout(300)
                target = out / f"{name}.png"
                await page.screenshot(path=str(target), full_page=name in ("run", "trajectory"))
                written.append(str(target))
            await browser.close()
        server.should_exit = True
    return written


if __name__ == "__main__":
    out = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else Path("docs/view")
    out.mkdir(parents=True, exist_ok=True)
    print(json.dumps({"screenshots": asyncio.run(shoot(out))}, indent=2))
