"""The terminal env's action format: one fenced ``bash`` block per turn, or ``submit``
(alone, as a ```` ```submit ```` block, or alone in a bash block). Grammar: :mod:`gymfleet.envs.actions`."""

from __future__ import annotations

from dataclasses import dataclass

from gymfleet.envs.actions import Command, Malformed, Word, parse_fenced_action

SUBMIT_WORD = "submit"


@dataclass(frozen=True)
class Submit:
    """The agent is done; grade now."""


Action = Command | Submit | Malformed

FORMAT_HELP = (
    "Reply with exactly one fenced code block tagged bash, e.g.\n"
    "```bash\nls -la\n```\n"
    "or, when the task is done, with the single word `submit` (or an empty ```submit``` block)."
)


def parse_action(text: str) -> Action:
    """Parses one agent turn.

    Args:
        text: the agent's whole message; prose around the block is allowed.

    Returns:
        :class:`Command`, :class:`Submit`, or :class:`Malformed` with the reason (never raises).
    """
    action = parse_fenced_action(text, (SUBMIT_WORD,), FORMAT_HELP)
    return Submit() if isinstance(action, Word) else action


__all__ = ["Action", "Command", "FORMAT_HELP", "Malformed", "Submit", "parse_action"]
