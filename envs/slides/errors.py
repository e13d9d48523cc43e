"""Errors raised by gymfleet.envs.slides.

Class tree::

    EnvError (gymfleet.envs.errors)
    ├── TaskError
    │   └── BriefError        a brief YAML or its gold deck is missing or malformed
    └── SlidesError
        └── RenderError       Chromium is missing, did not start, or could not render a deck

A deck the agent wrote badly is never an exception: it renders to a report that says what
is wrong, and scores low.
"""

from __future__ import annotations

from gymfleet.core.errors import EnvError
from gymfleet.envs.errors import TaskError


class BriefError(TaskError):
    """A brief YAML or its gold deck is missing or malformed; the message names the file."""


class SlidesError(EnvError):
    """Base class of the slides env's own failures (infrastructure, never the policy's)."""


class RenderError(SlidesError):
    """Chromium is missing, did not start, or crashed while rendering."""
