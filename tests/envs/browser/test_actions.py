"""The action language: parsing (no browser needed)."""

from __future__ import annotations

import pytest

from gymfleet.envs.browser.actions import BrowserAction, parse_action
from gymfleet.envs.browser.errors import ActionParseError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("click(12)", BrowserAction("click", 12)),
        ('fill(7, "hello world")', BrowserAction("fill", 7, text="hello world")),
        ("select(3, 'Audrye')", BrowserAction("select", 3, text="Audrye")),
        ('press("Enter")', BrowserAction("press", None, text="Enter")),
        ('press(4, "Tab")', BrowserAction("press", 4, text="Tab")),
        ("scroll(0, 200)", BrowserAction("scroll", None, dx=0, dy=200)),
        ("scroll(5, 0, -100)", BrowserAction("scroll", 5, dx=0, dy=-100)),
        ("hover(5)", BrowserAction("hover", 5)),
        ("noop()", BrowserAction("noop")),
        ("  click([12])\n", BrowserAction("click", 12)),
        ('click("12")', BrowserAction("click", 12)),
        ("```\nclick(3)\n```", BrowserAction("click", 3)),
        ("```python\nhover(2)\n```", BrowserAction("hover", 2)),
    ],
)
def test_parses_every_form(text: str, expected: BrowserAction) -> None:
    assert parse_action(text) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty action"),
        ("click on the button", "could not parse"),
        ("jump(3)", "unknown action 'jump'"),
        ("click()", "expected click(id)"),
        ('click("Submit")', "expected click(id)"),
        ("fill(7)", 'expected fill(id, "text")'),
        ("scroll(1)", "scroll(dx, dy) or scroll(id, dx, dy)"),
        ("click(x)", "literal numbers or quoted strings"),
        ("click(1); click(2)", "could not parse"),
        ("click(id=3)", "without keywords"),
        ("__import__('os').system('true')", "not a single call"),
    ],
)
def test_malformed_text_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ActionParseError) as info:
        parse_action(text)
    assert says in str(info.value)


def test_action_prints_as_it_parses() -> None:
    for text in ['fill(7, "a b")', "scroll(2, 0, 10)", 'press("Enter")', "noop()"]:
        assert str(parse_action(text)) == text.replace('"', "'")
