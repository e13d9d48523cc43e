"""The slides env's action format: one fenced ``bash`` block, or the word ``render`` or ``submit``.

Same grammar as the terminal env (:mod:`gymfleet.envs.actions`) plus ``render``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gymfleet.envs.actions import Command, Malformed, Word, bash_block, parse_fenced_action

WORDS = ("render", "submit")


@dataclass(frozen=True)
class Render:
    """Render the current ``deck.html`` and answer with the text report."""


@dataclass(frozen=True)
class Submit:
    """The deck is final: render and score it."""


Action = Command | Render | Submit | Malformed

FORMAT_HELP = (
    "Reply with exactly one fenced code block tagged bash, e.g.\n"
    "```bash\ncat > deck.html <<'EOF'\n...\nEOF\n```\n"
    "or with the single word `render` (see the render report of deck.html) or `submit` (finish)."
)


def parse_action(text: str) -> Action:
    """Parses one agent turn; prose around a bash block is allowed. Never raises."""
    action = parse_fenced_action(text, WORDS, FORMAT_HELP)
    if isinstance(action, Word):
        return Render() if action.word == "render" else Submit()
    return action


__all__ = ["Action", "Command", "FORMAT_HELP", "Malformed", "Render", "Submit", "bash_block", "parse_action"]
