"""The terminal env's action format: one fenced ``bash`` block per turn, or ``submit``.

Fences are found with markdown-it (CommonMark), not a hand-written regex, so that tildes,
longer fences and fences nested in lists parse the way a Markdown reader expects.
"""

from __future__ import annotations

from dataclasses import dataclass

from markdown_it import MarkdownIt

SHELL_LANGS = frozenset({"bash", "sh", "shell"})
SUBMIT_WORD = "submit"


@dataclass(frozen=True)
class Command:
    """Run ``script`` in the persistent shell."""

    script: str


@dataclass(frozen=True)
class Submit:
    """The agent is done; grade now."""


@dataclass(frozen=True)
class Malformed:
    """The turn did not follow the format; ``reason`` tells the agent what was wrong."""

    reason: str


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
    if text.strip().lower() == SUBMIT_WORD:
        return Submit()
    fences = [t for t in MarkdownIt("commonmark").parse(text) if t.type == "fence"]
    if not fences:
        return Malformed(f"No fenced code block found. {FORMAT_HELP}")
    if len(fences) > 1:
        return Malformed(f"Found {len(fences)} code blocks; send exactly one per turn. {FORMAT_HELP}")
    lang = fences[0].info.strip().split(maxsplit=1)[0].lower() if fences[0].info.strip() else ""
    if lang == SUBMIT_WORD:
        return Submit()
    if lang not in SHELL_LANGS:
        shown = f"tagged {lang!r}" if lang else "untagged"
        return Malformed(f"The code block is {shown}; tag it bash. {FORMAT_HELP}")
    if not fences[0].content.strip():
        return Malformed(f"The bash block is empty. {FORMAT_HELP}")
    return Command(fences[0].content)
