"""Chromium in the gymfleet/browser container, reached over CDP (builds the image if needed)."""

from __future__ import annotations

import docker
import pytest

from gymfleet.envs.browser.chromium import DockerChromium, open_host
from gymfleet.envs.browser.env import BrowserEnv
from gymfleet.envs.browser.miniwob import miniwob_html_dir
from gymfleet.envs.episode import run_episode
from gymfleet.envs.sandbox.base import SandboxLabels


@pytest.mark.docker
@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.asyncio
async def test_gold_in_a_container_without_network(docker_available: bool) -> None:
    labels = SandboxLabels(run_id="test-browser-docker")
    host = DockerChromium(pages_dirs=(miniwob_html_dir(),), labels=labels)
    env = BrowserEnv(host=host, tasks=["click-button", "enter-text"])
    try:
        for instance in ("click-button@1", "enter-text@2"):
            await env.reset_async(options={"instance_id": instance})
            episode = await run_episode(env, env.gold_policy(), instance_id=instance)
            assert episode.reward == 1.0 and episode.info["browser"] == "docker"
        fetched = await env._page.evaluate(
            "() => fetch('http://example.com').then(() => 'reached').catch(() => 'blocked')"
        )
        assert fetched == "blocked"
    finally:
        await env.close_async()
        await host.close()
    left = docker.from_env().containers.list(all=True, filters={"label": "gymfleet.run_id=test-browser-docker"})
    assert left == []


def test_file_url_maps_only_copied_folders(tmp_path) -> None:
    host = open_host("docker", pages_dirs=(tmp_path,))
    assert host.file_url(tmp_path / "a b.html") == "file:///opt/gymfleet/pages/0/a%20b.html"
    with pytest.raises(Exception, match="not under a folder copied"):
        host.file_url(tmp_path.parent / "elsewhere.html")
