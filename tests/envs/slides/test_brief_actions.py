"""Briefs load and fail clearly; the action format parses like the terminal env's plus `render`."""

from __future__ import annotations

import pytest

from gymfleet.envs.slides.actions import Command, Malformed, Render, Submit, bash_block, parse_action
from gymfleet.envs.slides.brief import gold_deck, load_briefs
from gymfleet.envs.slides.errors import BriefError


def test_shipped_briefs_each_have_points_in_their_gold_deck() -> None:
    briefs = load_briefs()
    assert len(briefs) >= 20
    for brief in briefs.values():
        html = gold_deck(brief.id).lower().replace("&amp;", "&")
        assert html.count('<section class="slide') == brief.n_slides
        assert all(p.lower() in html for p in brief.points), brief.id


def test_bad_briefs_name_the_file_and_the_fix(tmp_path) -> None:
    (tmp_path / "x.yaml").write_text("id: x\ntopic: t\naudience: a\nn_slides: 0\npoints: [a]\n")
    with pytest.raises(BriefError, match=r"(?s)x\.yaml.*n_slides"):
        load_briefs(tmp_path)
    (tmp_path / "x.yaml").write_text("id: y\ntopic: t\naudience: a\nn_slides: 2\npoints: [a]\n")
    with pytest.raises(BriefError, match="must equal the file name"):
        load_briefs(tmp_path)
    (tmp_path / "x.yaml").write_text("id: x\ntopic: t\naudience: a\nn_slides: 2\npoints: ['!!']\n")
    with pytest.raises(BriefError, match="without any letter"):
        load_briefs(tmp_path)
    with pytest.raises(BriefError, match="gold deck .* is missing"):
        gold_deck("x", tmp_path)
    with pytest.raises(BriefError, match="no \\*.yaml"):
        load_briefs(tmp_path / "empty")


def test_parse_action() -> None:
    assert parse_action(" Render ") == Render()
    assert parse_action("`submit`") == Submit()
    assert parse_action("Writing it now:\n```bash\necho hi\n```\n") == Command("echo hi\n")
    assert isinstance(parse_action("```python\nprint(1)\n```"), Malformed)
    assert isinstance(parse_action("```bash\na\n```\n```bash\nb\n```"), Malformed)
    assert isinstance(parse_action("I will render soon"), Malformed)
    script = "echo '```'"
    assert parse_action(bash_block(script)) == Command(script + "\n")


async def test_oversized_deck_is_a_report_error_without_starting_chromium() -> None:
    from gymfleet.envs.slides.render import DeckRenderer, RenderConfig

    renderer = DeckRenderer(RenderConfig(max_html_bytes=100))
    report = await renderer.render("<section class='slide'>" + "x" * 200)
    assert report.n_slides == 0 and "larger than 100 bytes" in (report.error or "")
    await renderer.close()
