"""The page as text: render and parse back, and stable ids on a real page."""

from __future__ import annotations

import pytest

from gymfleet.envs.browser.page_text import (
    PageNode,
    PageView,
    observation_text,
    parse_observation,
    snapshot_nodes,
)


def test_rendering_parses_back_exactly() -> None:
    nodes = (
        PageNode(1, "paragraph", "Say \"hi\"\\ now", depth=0),
        PageNode(2, "textbox", "User name", value="al ice", states=("focused",), depth=1),
        PageNode(3, "checkbox", "ok", states=("checked", "disabled"), depth=1),
        PageNode(4, "button", depth=2),
        PageNode(5, "combobox", "", value="", depth=0),
    )
    view = PageView("Click on the \"Yes\" button.", nodes)
    text = observation_text(view, "Last action: click(3) done.")
    assert parse_observation(text) == view
    assert '[2] textbox "User name" value="al ice" focused' in text




@pytest.mark.browser
@pytest.mark.asyncio(loop_scope="session")
async def test_ids_are_stable_and_hidden_parts_left_out(browser_host) -> None:
    browser = await browser_host.start()
    page = await browser.new_page()
    try:
        await page.set_content(
            "<div id='hud'>score 3</div><p>Hello <b>world</b></p>"
            "<label for='u'>User</label><input id='u' value='x'>"
            "<button style='display:none'>Hidden</button><select><option>a</option>"
            "<option selected>b</option></select>"
        )
        first = await snapshot_nodes(page, skip_ids=("hud",))
        await page.evaluate("document.body.insertBefore(document.createElement('button'), document.body.firstChild).textContent = 'New'")
        second = await snapshot_nodes(page, skip_ids=("hud",))
    finally:
        await page.close()
    names = {n.name: n for n in first}
    assert "score 3" not in names and "Hidden" not in names
    assert names["User"].role == "textbox" and names["User"].value == "x"
    assert names["b"].states == ("selected",) and names[""].value == "b"
    # The new button gets a new id; every element seen before keeps its id.
    before = {n.name: n.id for n in first}
    after = {n.name: n.id for n in second}
    assert after["New"] not in before.values()
    assert all(after[name] == id_ for name, id_ in before.items())
