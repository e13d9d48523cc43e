"""The slides env's action format: one fenced ``bash`` block, or the word ``render`` or ``submit``.

Same grammar as the terminal env (fences found with markdown-it, CommonMark) plus ``render``.
"""

from __future__ import annotations

from dataclasses import dataclass

from markdown_it import MarkdownIt

SHELL_LANGS = frozenset({"bash", "sh", "shell"})
WORDS = ("render", "submit")


@dataclass(frozen=True)
class Command:
    """Run ``script`` with bash in the sandbox's working folder."""

    script: str


@dataclass(frozen=True)
class Render:
    """Render the current ``deck.html`` and answer with the text report."""


@dataclass(frozen=True)
class Submit:
    """The deck is final: render and score it."""


@dataclass(frozen=True)
class Malformed:
    """The turn did not follow the format; ``reason`` says what was wrong."""

    reason: str


Action = Command | Render | Submit | Malformed

FORMAT_HELP = (
    "Reply with exactly one fenced code block tagged bash, e.g.\n"
    "```bash\ncat > deck.html <<'EOF'\n...\nEOF\n```\n"
    "or with the single word `render` (see the render report of deck.html) or `submit` (finish)."
)


def parse_action(text: str) -> Action:
    """Parses one agent turn; prose around a bash block is allowed. Never raises."""
    word = text.strip().strip("`").strip().lower()
    if word in WORDS:
        return Render() if word == "render" else Submit()
    fences = [t for t in MarkdownIt("commonmark").parse(text) if t.type == "fence"]
    if not fences:
        return Malformed(f"No fenced code block and no `render`/`submit` found. {FORMAT_HELP}")
    if len(fences) > 1:
        return Malformed(f"Found {len(fences)} code blocks; send exactly one per turn. {FORMAT_HELP}")
    info = fences[0].info.strip()
    lang = info.split(maxsplit=1)[0].lower() if info else ""
    if lang in WORDS:
        return Render() if lang == "render" else Submit()
    if lang not in SHELL_LANGS:
        shown = f"tagged {lang!r}" if lang else "untagged"
        return Malformed(f"The code block is {shown}; tag it bash. {FORMAT_HELP}")
    if not fences[0].content.strip():
        return Malformed(f"The bash block is empty. {FORMAT_HELP}")
    return Command(fences[0].content)


def bash_block(script: str) -> str:
    """``script`` in a fenced bash block whose fence is longer than any backtick run inside."""
    longest, run = 0, 0
    for ch in script:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}bash\n{script.rstrip()}\n{fence}"
