"""One parser for every diff form that git or ``patch`` accept: the per-file blocks of a patch and
the paths each block names. The grader filters a model patch with it and applies only what it
re-joins, so what the apply commands read is what the filter saw.

Forms read (git's ``apply.c`` and GNU patch's ``pch.c`` accept the same):

* git's ``diff --git a/x b/x`` headers, unquoted or C-quoted (``diff --git "a/x" "b/x"``, with
  ``\\t``, ``\\"``, ``\\\\`` and octal-escaped bytes), with their ``---``/``+++``,
  ``rename``/``copy from``/``to`` lines;
* unified diffs (``---``/``+++`` headers, ``@@ -a,b +c,d @@`` hunks whose lines are counted, so a
  removed line ``-- x`` is never read as a header);
* context diffs (``diff -c``: ``*** old``/``--- new`` headers, ``***************`` hunks);
* ``Index: path`` lines, which ``patch`` reads as a file name, and ``diff ...`` command lines.

Lines outside any block (leading garbage, text between blocks) are not part of any block and are
never applied. A block's ``paths`` holds every name it carries, raw and with the first component
stripped (``-p1``), so a filter that drops a block when any of them matches sees what either tool
would write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_CONTEXT_RANGE = re.compile(r"^(\*\*\*|---) \d+(?:,\d+)? (\*\*\*\*|----)\s*$")
_OCTAL = re.compile(r"\\([0-7]{3}|.)")
_ESCAPES = {"t": "\t", "n": "\n", "\\": "\\", '"': '"', "a": "\a", "b": "\b", "f": "\f",
            "r": "\r", "v": "\v"}


@dataclass(frozen=True)
class FileDiff:
    """One file's block of a patch.

    Attributes:
        paths: every path the block names (headers, ``Index:``, renames), raw and with the first
            component stripped; ``/dev/null`` left out.
        text: the block's lines, as they are applied.
    """

    paths: tuple[str, ...]
    text: str


def unquote(name: str) -> str:
    """A path as git or ``patch`` write it, unquoted: ``"a/x\\tb"`` -> ``a/x<TAB>b``; octal
    escapes are bytes of UTF-8. An unquoted name is returned as is, without a trailing
    tab-separated date (``--- a/x\\t2024-01-01``)."""
    name = name.rstrip("\n")
    if not (len(name) >= 2 and name.startswith('"')):
        return name.split("\t", 1)[0].rstrip()
    end = _closing_quote(name)
    body = name[1:end]
    out = bytearray()
    pos = 0
    for match in _OCTAL.finditer(body):
        out += body[pos:match.start()].encode()
        code = match.group(1)
        out += bytes([int(code, 8) & 0xFF]) if len(code) == 3 else _ESCAPES.get(code, code).encode()
        pos = match.end()
    out += body[pos:].encode()
    return out.decode("utf-8", "replace")


def _closing_quote(name: str) -> int:
    i = 1
    while i < len(name):
        if name[i] == "\\":
            i += 2
            continue
        if name[i] == '"':
            return i
        i += 1
    return len(name)


def _git_header_names(rest: str) -> list[str]:
    """The names of ``diff --git <rest>``: two quoted names, or every way to split an unquoted
    pair at `` b/`` (ambiguous when a name holds a space: all are kept)."""
    rest = rest.rstrip("\n")
    if rest.startswith('"'):
        end = _closing_quote(rest)
        return [unquote(rest[:end + 1]), unquote(rest[end + 1:].strip())]
    splits = [(rest[:m.start()], unquote(rest[m.end():]))
              for m in re.finditer(r" (?=\"?b/)", rest)]
    same = [pair for pair in splits if pair[0][2:] == pair[1][2:]]  # git's own `a/X b/X`
    if len(same) == 1:
        return list(same[0])
    return [rest, *(name for pair in splits for name in pair)]


def _with_stripped(names: list[str]) -> set[str]:
    """Each name, and the name without its first component (``patch -p1``, ``git apply``)."""
    out: set[str] = set()
    for name in names:
        name = name.strip()
        if not name or name == "/dev/null":
            continue
        out.add(name)
        if "/" in name:
            out.add(name.split("/", 1)[1])
    return out


def parse_diff(patch: str) -> list[FileDiff]:
    """Splits ``patch`` into its per-file blocks (see the module's docstring for the forms).

    Args:
        patch: a diff in any form git or ``patch`` accept.

    Returns:
        The blocks in patch order; text belonging to no block is left out.
    """
    lines = patch.splitlines(keepends=True)
    blocks: list[FileDiff] = []
    start: int | None = None
    names: list[str] = []
    had_hunk = False
    i = 0
    while i < len(lines):
        line, nxt = lines[i], (lines[i + 1] if i + 1 < len(lines) else "")
        # a header pair opens a block unless it is the header of one a `diff`/`Index:` line opened
        opened_by_line = start is not None and lines[start].startswith(("diff ", "Index: "))
        if line.startswith(("diff ", "Index: ")) or (
                _is_file_header(line, nxt) and (had_hunk or not opened_by_line)):
            if start is not None:
                blocks.append(_block(lines[start:i], names))
            start, names, had_hunk = i, _line_names(line), False
        if start is None:
            i += 1
            continue
        if line.startswith(("--- ", "+++ ", "*** ")) and not _CONTEXT_RANGE.match(line):
            names.append(unquote(line[4:]))
        for key in ("rename from ", "rename to ", "copy from ", "copy to "):
            if line.startswith(key):
                names.append(unquote(line[len(key):]))
        hunk = _HUNK.match(line)
        had_hunk = had_hunk or bool(hunk) or line.startswith("***************")
        i += 1
        if hunk:
            i = _skip_hunk(lines, i, *(1 if n is None else int(n) for n in hunk.groups()))
    if start is not None:
        blocks.append(_block(lines[start:], names))
    return blocks


def _block(lines: list[str], names: list[str]) -> FileDiff:
    return FileDiff(tuple(sorted(_with_stripped(names))), "".join(lines))


def _line_names(line: str) -> list[str]:
    """The names a block's first line carries (``diff --git``, ``Index:``, ``diff ... a b``)."""
    if line.startswith("diff --git "):
        return _git_header_names(line[len("diff --git "):])
    if line.startswith("Index: "):
        return [unquote(line[len("Index: "):])]
    if line.startswith("diff "):
        return [w for w in line.split()[1:] if not w.startswith("-")]
    return []


def _is_file_header(line: str, nxt: str) -> bool:
    """A unified (``---``/``+++``) or context (``***``/``---``) pair of file names."""
    if line.startswith("--- ") and nxt.startswith("+++ "):
        return True
    return (line.startswith("*** ") and nxt.startswith("--- ")
            and not _CONTEXT_RANGE.match(line) and not _CONTEXT_RANGE.match(nxt))


def _skip_hunk(lines: list[str], i: int, n_old: int, n_new: int) -> int:
    """The index after a unified hunk's body of ``n_old`` old and ``n_new`` new lines."""
    while i < len(lines) and (n_old > 0 or n_new > 0):
        tag = lines[i][:1]
        if tag == " " or lines[i] in ("\n", "\r\n"):
            n_old, n_new = n_old - 1, n_new - 1
        elif tag == "-":
            n_old -= 1
        elif tag == "+":
            n_new -= 1
        elif tag != "\\":
            break
        i += 1
    while i < len(lines) and lines[i].startswith("\\"):
        i += 1
    return i


def join(blocks: list[FileDiff]) -> str:
    """The patch made of ``blocks``, in order."""
    return "".join(b.text for b in blocks)
