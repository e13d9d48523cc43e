"""The checks as pure functions over hand-made render reports (no browser)."""

from __future__ import annotations

import pytest

from gymfleet.envs.slides.brief import Brief
from gymfleet.envs.slides.checks import WEIGHTS, CheckConfig, block_gaps_em, normalize, score_deck
from gymfleet.envs.slides.records import RenderReport, SlideRender, TextItem

BRIEF = Brief(id="t", topic="t", audience="a", n_slides=2, points=["Lower costs by 12%", "ship weekly"])


def text(s: str, x: float, y: float, *, font: float = 32, title: bool = False, hidden: str | None = None,
         w: float | None = None) -> TextItem:
    width = w if w is not None else 0.55 * font * len(s)
    return TextItem(
        text=s, tag="h1" if title else "li", in_title=title, rects=[(x, y, width, font * 1.15)],
        font_px=font, effective_font_px=font, color="rgb(0, 0, 0)", visibility="visible", opacity=1.0,
        letter_spacing_px=0, word_spacing_px=0, line_pitch_px=None, char_width_ratio=0.55,
        shown_fraction=1.0, ink_px=1000, ink_density=0.2, contrast=15.0, hidden_reason=hidden)


def slide(i: int, texts: list[TextItem]) -> SlideRender:
    return SlideRender(index=i, has_title_element=True, texts=texts, scroll_w=1280, scroll_h=720, ink_ratio=0.03)


def good_slide(i: int, body: list[str]) -> SlideRender:
    texts = [text("A title", 96, 60, font=46, title=True)]
    texts += [text(f"{b}, explained in a few more words", 130, 250 + 63 * k) for k, b in enumerate(body)]
    return slide(i, texts)


def report(*slides: SlideRender) -> RenderReport:
    return RenderReport(width_px=1280, height_px=720, n_slides=len(slides), slides=list(slides))


def test_weights_sum_to_one_and_points_dominate() -> None:
    assert sum(WEIGHTS.values()) == pytest.approx(1.0)
    assert WEIGHTS["required_points"] >= 0.5


def test_normalize_ignores_case_accents_punctuation_only() -> None:
    assert normalize("  Lower COSTS, by 12%! ") == "lower costs by 12"
    assert normalize("Café — naïve") == "cafe naive"


def test_clean_deck_scores_one() -> None:
    card = score_deck(report(good_slide(0, ["Lower costs by 12% this year", "Tests pass", "Docs"]),
                             good_slide(1, ["We ship weekly now", "Fewer incidents", "Happier users"])), BRIEF)
    assert card.reward == 1.0, [(c.name, c.detail) for c in card.checks if c.score < 1]


def test_points_are_matched_word_for_word_on_visible_text_only() -> None:
    s0 = good_slide(0, ["Lower costs by 12% this year", "Tests pass", "Docs"])
    s1 = good_slide(1, ["We shipweekly", "Fewer incidents", "Happier users"])
    s1.texts.append(text("ship weekly", 130, 600, hidden="visibility:hidden"))
    card = score_deck(report(s0, s1), BRIEF)
    assert card.by_name()["required_points"].score == 0.5
    assert card.by_name()["no_hidden_text"].score == 0.5


def test_overlapping_texts_fail_and_their_points_do_not_count() -> None:
    s0 = good_slide(0, ["Lower costs by 12% this year", "Tests pass", "Docs"])
    s0.texts.append(text("Overlapping words here", 140, 255))
    card = score_deck(report(s0, good_slide(1, ["ship weekly", "b c d", "e f g"])), BRIEF)
    assert card.by_name()["no_overlap"].score == 0.5
    assert card.by_name()["required_points"].score == 0.5


def test_inflated_gaps_are_measured_in_font_sizes() -> None:
    tight = [text("one", 100, 100), text("two", 100, 163)]
    loose = [text("one", 100, 100), text("two", 100, 400)]
    assert block_gaps_em(tight)[0] < 1.0 < CheckConfig().max_block_gap_em < block_gaps_em(loose)[0]
    side_by_side = [text("left", 100, 100), text("right", 700, 500)]
    assert block_gaps_em(side_by_side) == []


def test_empty_slides_earn_no_layout_credit_and_missing_deck_scores_zero() -> None:
    empty = score_deck(report(slide(0, []), slide(1, [])), BRIEF)
    assert empty.reward == pytest.approx(WEIGHTS["slide_count"])
    missing = score_deck(RenderReport(width_px=1280, height_px=720, n_slides=0, error="no deck.html"), BRIEF)
    assert missing.reward == 0.0 and all(c.detail == "no deck.html" for c in missing.checks)


def test_a_box_poking_out_fails_fits_frame_but_keeps_its_points() -> None:
    from gymfleet.envs.slides.records import ElementBox

    s0 = good_slide(0, ["Lower costs by 12% this year", "Tests pass", "Docs"])
    s0.boxes.append(ElementBox(tag="section", box=(8, 8, 1280, 720)))
    s1 = good_slide(1, ["We ship weekly now", "Fewer incidents", "Happier users"])
    s1.texts[1].shown_fraction, s1.texts[1].hidden_reason = 0.6, "cut off by the frame edge"
    card = score_deck(report(s0, s1), BRIEF).by_name()
    assert card["fits_frame"].score == 0.0 and "leaves the 1280x720 frame" in card["fits_frame"].detail
    assert card["required_points"].score == 0.5  # slide 1 counts; slide 2 has cut text, so not


def test_a_small_footer_far_below_is_not_inflated_spacing_but_spread_bullets_are() -> None:
    from gymfleet.envs.slides.checks import spacing_problems

    cfg = CheckConfig()
    title = text("A title", 96, 60, font=46, title=True)
    bullets = [text("First point in a few words", 130, 200), text("Second point in a few words", 130, 263)]
    footer = text("Source: annual report 2025", 96, 680, font=18)
    assert spacing_problems(slide(0, [title, *bullets, footer]), cfg) == []
    spread = [text("First point in a few words", 130, 200), text("Second point in a few words", 130, 560)]
    assert "inflated" in " ".join(spacing_problems(slide(0, [title, *spread]), cfg))
