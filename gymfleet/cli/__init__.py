"""The `gymfleet` command line: one typer app (:mod:`gymfleet.cli.main`), each command group in its
own module of this package.

Errors a user can cause (any GymfleetError, a disk that is full or read-only) are handled once,
for every command, by :class:`gymfleet.cli.errors.GymfleetGroup`: one line, exit status 2.
"""

from __future__ import annotations

from gymfleet.cli.main import app

__all__ = ["app"]
