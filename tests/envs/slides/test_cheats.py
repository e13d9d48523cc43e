"""Decks that cheat score below 0.5; hiding content never beats leaving it out."""

from __future__ import annotations

import re

import pytest

from gymfleet.envs.slides.brief import gold_deck
from gymfleet.envs.slides.checks import score_deck

from .cheats import HIDING_CSS, LAYOUT_CHEATS, stuff_hidden, with_css

pytestmark = pytest.mark.browser
session_loop = pytest.mark.asyncio(loop_scope="session")
BRIEF = "solar-microgrids"


async def _score(renderer, briefs, html: str):
    report = await renderer.render(html)
    return score_deck(report, briefs[BRIEF])


@session_loop
@pytest.mark.parametrize("name", sorted(HIDING_CSS))
async def test_hidden_body_text_scores_below_half(renderer, briefs, name: str) -> None:
    card = await _score(renderer, briefs, with_css(gold_deck(BRIEF), HIDING_CSS[name]))
    checks = card.by_name()
    assert checks["required_points"].score == 0.0, checks["required_points"].detail
    assert card.reward < 0.5, [(c.name, c.score, c.detail) for c in card.checks]


@session_loop
@pytest.mark.parametrize("name", sorted(LAYOUT_CHEATS))
async def test_layout_cheats_score_below_half(renderer, briefs, name: str) -> None:
    card = await _score(renderer, briefs, LAYOUT_CHEATS[name](gold_deck(BRIEF)))
    assert card.reward < 0.5, [(c.name, c.score, c.detail) for c in card.checks]


@session_loop
async def test_keyword_stuffing_in_hidden_element_scores_below_half(renderer, briefs) -> None:
    card = await _score(renderer, briefs, stuff_hidden(gold_deck(BRIEF), briefs[BRIEF].points))
    checks = card.by_name()
    assert checks["required_points"].score == 0.0
    assert checks["no_hidden_text"].score == 0.0
    assert card.reward < 0.5


@session_loop
async def test_wrong_slide_count_and_missing_titles_lower_the_score(renderer, briefs) -> None:
    gold = gold_deck(BRIEF)
    full = (await _score(renderer, briefs, gold)).reward
    last = gold.rindex('<section class="slide')
    short = gold[:last] + gold[gold.index("</section>", last) + len("</section>"):]
    untitled = re.sub(r"<(/?)h2>", r"<\1div>", gold)
    short_card = await _score(renderer, briefs, short)
    untitled_card = await _score(renderer, briefs, untitled)
    assert short_card.by_name()["slide_count"].score == 0.0 and short_card.reward < full
    assert untitled_card.by_name()["titles"].score == pytest.approx(0.2)
    assert untitled_card.reward < full


@session_loop
async def test_hiding_a_point_never_beats_leaving_it_out(renderer, briefs) -> None:
    gold = gold_deck(BRIEF)
    bullet = "<li>Train two local technicians per site</li>"
    omitted = gold.replace(bullet, "")
    hidden = gold.replace(bullet, bullet.replace("<li>", '<li style="color: transparent">'))
    omitted_card = await _score(renderer, briefs, omitted)
    hidden_card = await _score(renderer, briefs, hidden)
    assert omitted_card.by_name()["required_points"].score == pytest.approx(0.75)
    assert hidden_card.by_name()["required_points"].score == pytest.approx(0.75)
    assert hidden_card.reward < omitted_card.reward


@session_loop
async def test_meta_refresh_is_ignored_and_a_broken_page_is_a_report_error(renderer, briefs) -> None:
    # A refresh (immediate or delayed) would race the render; the renderer drops it, so the
    # deck is judged as written, the same every time.
    for refresh in ('<META HTTP-EQUIV="Refresh" content="0; url=http://example.com/">',
                    '<meta http-equiv=refresh content="1">'):
        report = await renderer.render(refresh + gold_deck(BRIEF))
        assert report.error is None and score_deck(report, briefs[BRIEF]).reward == 1.0
    # A frame that navigates (to a refused address) breaks the page: a report error, not a crash.
    framed = await renderer.render('<iframe src="http://example.com/"></iframe>' + gold_deck(BRIEF))
    assert framed.error and "navigated" in framed.error
    assert score_deck(framed, briefs[BRIEF]).reward < 0.5
    empty = await renderer.render("not html at all")
    assert empty.n_slides == 0 and score_deck(empty, briefs[BRIEF]).reward == 0.0
