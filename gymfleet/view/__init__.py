"""The trajectory viewer (``gymfleet view``): a local web app over a run's store, read-only.

``create_app`` builds the Starlette app over a :class:`StoreSet`; ``gymfleet/cli/view.py`` serves
it with uvicorn. See ``docs/view.md``.
"""

from __future__ import annotations

from gymfleet.view.app import create_app
from gymfleet.view.stores import StoreSet

__all__ = ["StoreSet", "create_app"]
