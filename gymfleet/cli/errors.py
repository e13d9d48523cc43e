"""The command line's one error handler: bad input is one line on stderr and exit status 2.

Every ``gymfleet`` command runs inside :class:`GymfleetGroup`, which turns what a user can cause
into one line naming the fix, never a traceback:

* any :class:`~gymfleet.core.errors.GymfleetError` (a config, store, sandbox, policy or bucket
  that cannot be used): its message, folded onto one line;
* a file system that refuses a write (disk full, read-only, no permission), from whichever part
  of the run was writing: what, where, and that rerunning the same command resumes.

Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno
import re
from typing import Any

from rich.console import Console
from rich.text import Text
import typer
from typer import _click
from typer.core import TyperGroup

from gymfleet.core.errors import GymfleetError

EXIT_BAD_INPUT = 2
_FILESYSTEM_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
_MAX_CHARS = 2000


def one_line(text: str) -> str:
    """``text`` with its lines and runs of blanks folded into single spaces, at most 2,000
    characters (a long message keeps its start)."""
    folded = re.sub(r"\s+", " ", text).strip()
    return folded if len(folded) <= _MAX_CHARS else folded[: _MAX_CHARS - 3] + "..."


def describe(exc: BaseException) -> str | None:
    """The one-line message for ``exc`` when it is the user's to fix, else None (a bug)."""
    if isinstance(exc, GymfleetError):
        return one_line(str(exc) or type(exc).__name__)
    if isinstance(exc, OSError) and exc.errno in _FILESYSTEM_ERRNOS:
        where = f" {exc.filename}" if exc.filename else ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            fix = "free space there, then run the same command again: what was stored is kept and the run resumes"
        else:
            fix = "make it writable or point the config's paths (store, metrics_path, report_dir, bucket) elsewhere"
        return one_line(f"cannot write{where}: {exc.strerror or exc}; {fix}")
    return None


def report(exc: BaseException, console: Console | None = None) -> None:
    """Prints ``error: <one line>`` for ``exc`` on stderr."""
    message = describe(exc) or one_line(str(exc))
    (console or Console(stderr=True)).print(Text("error: ", style="red") + Text(message), soft_wrap=True)


class GymfleetGroup(TyperGroup):
    """The root command group: commands run as usual; what :func:`describe` recognises ends the
    process with one line and exit status 2."""

    def invoke(self, ctx: _click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (GymfleetError, OSError) as exc:
            if describe(exc) is None:
                raise
            report(exc)
            raise typer.Exit(EXIT_BAD_INPUT) from exc

