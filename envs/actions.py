"""The shared text-action grammar of the shell-driven envs: one fenced ``bash`` block per turn,
or one of the env's control words (``submit``, ``render``...).

Fences are found with markdown-it (CommonMark), not a hand-written regex, so that tildes,
longer fences and fences nested in lists parse the way a Markdown reader expects. A control
word may come alone (``submit``), as a fence's tag (a ```` ```submit ```` block), or as the whole
content of a bash block.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass

from markdown_it import MarkdownIt

SHELL_LANGS = frozenset({"bash", "sh", "shell"})


@dataclass(frozen=True)
class Command:
    """Run ``script`` with bash in the sandbox."""

    script: str


@dataclass(frozen=True)
class Word:
    """A control word of the env (lower-case), e.g. ``submit``."""

    word: str


@dataclass(frozen=True)
class Malformed:
    """The turn did not follow the format; ``reason`` tells the agent what was wrong."""

    reason: str


def parse_fenced_action(text: str, words: Collection[str], format_help: str) -> Command | Word | Malformed:
    """Parses one agent turn; prose around the block is allowed. Never raises.

    Args:
        text: the agent's whole message.
        words: the env's control words, lower-case.
        format_help: appended to every Malformed reason (how to answer instead).

    Returns:
        :class:`Command`, :class:`Word` or :class:`Malformed`.
    """
    alone = text.strip().strip("`").strip().lower()
    if alone in words:
        return Word(alone)
    fences = [t for t in _markdown().parse(text) if t.type == "fence"]
    if not fences:
        options = " and no " + "/".join(f"`{w}`" for w in words) if words else ""
        return Malformed(f"No fenced code block{options} found. {format_help}")
    if len(fences) > 1:
        return Malformed(f"Found {len(fences)} code blocks; send exactly one per turn. {format_help}")
    info = fences[0].info.strip()
    lang = info.split(maxsplit=1)[0].lower() if info else ""
    if lang in words:
        return Word(lang)
    if lang not in SHELL_LANGS:
        shown = f"tagged {lang!r}" if lang else "untagged"
        return Malformed(f"The code block is {shown}; tag it bash. {format_help}")
    content = fences[0].content
    if content.strip().lower() in words:
        return Word(content.strip().lower())
    if not content.strip():
        return Malformed(f"The bash block is empty. {format_help}")
    return Command(content)


@functools.cache
def _markdown() -> MarkdownIt:
    """One CommonMark parser per process: building one (its rule chains) costs more than parsing
    a turn, and ``parse`` keeps no state between calls."""
    return MarkdownIt("commonmark")


def bash_block(script: str) -> str:
    """``script`` in a fenced bash block whose fence is longer than any backtick run inside."""
    longest, run = 0, 0
    for ch in script:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}bash\n{script.rstrip()}\n{fence}"
