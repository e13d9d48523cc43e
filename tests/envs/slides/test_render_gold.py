"""Every shipped gold deck renders to real slide PNGs and scores at least 0.9."""

from __future__ import annotations

import asyncio

import pytest
from PIL import Image

from gymfleet.envs.slides.brief import gold_deck
from gymfleet.envs.slides.checks import score_deck, visible_points

pytestmark = pytest.mark.browser
session_loop = pytest.mark.asyncio(loop_scope="session")


def test_at_least_twenty_briefs_each_with_a_gold_deck(briefs) -> None:
    assert len(briefs) >= 20
    for brief_id in briefs:
        assert "section class=\"slide" in gold_deck(brief_id)


@session_loop
async def test_every_gold_deck_scores_at_least_0_9(renderer, briefs, tmp_path) -> None:
    limit = asyncio.Semaphore(4)  # a few decks at once keeps Chromium's processes busy

    async def render(brief_id: str):
        async with limit:
            return await renderer.render(gold_deck(brief_id), tmp_path / brief_id)

    reports = await asyncio.gather(*(render(b) for b in briefs))
    low = {}
    for (brief_id, brief), report in zip(briefs.items(), reports):
        card = score_deck(report, brief)
        if card.reward < 0.9:
            low[brief_id] = [(c.name, c.score, c.detail) for c in card.checks if c.score < 1]
        assert report.n_slides == brief.n_slides == len(list((tmp_path / brief_id).glob("slide-*.png")))
        assert all(visible_points(report, brief).values()), brief_id
    assert not low, low


@session_loop
async def test_pngs_are_real_1280x720_slides(renderer, briefs, tmp_path) -> None:
    report = await renderer.render(gold_deck("solar-microgrids"), tmp_path)
    assert [s.png_path for s in report.slides] == [
        str(tmp_path / f"slide-{i:02d}.png") for i in range(1, report.n_slides + 1)]
    with Image.open(tmp_path / "slide-02.png") as img:
        assert img.size == (1280, 720)
        colours = img.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 50  # anti-aliased text, not a blank frame
    title = [t for t in report.slides[1].texts if t.in_title]
    assert title and title[0].text == "Why clinics lose power" and title[0].visible
    again = await renderer.render(gold_deck("solar-microgrids"))
    assert [s.texts for s in again.slides] == [s.texts for s in report.slides]  # deterministic


@session_loop
async def test_a_dead_chromium_is_restarted_for_the_next_deck(chromium_path) -> None:
    from gymfleet.envs.slides.render import DeckRenderer, RenderConfig

    async with DeckRenderer(RenderConfig(executable_path=chromium_path)) as renderer:
        await renderer._browser.close()  # as if Chromium had crashed
        report = await renderer.render(gold_deck("incident-postmortems"))
    assert report.error is None and report.n_slides == 4
