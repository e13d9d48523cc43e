"""Errors raised by gymfleet.trainer (the learner side).

Class tree (under :class:`gymfleet.core.errors.GymfleetError`; the whole tree is drawn in
``gymfleet/core/errors.py``)::

    TrainError                  = gymfleet.core.errors.TrainError
    └── BucketError             a bucket URL cannot be used, or a version is missing or incomplete
"""

from __future__ import annotations

from gymfleet.core.errors import TrainError

__all__ = ["BucketError", "TrainError"]


class BucketError(TrainError):
    """A bucket URL cannot be used, or a version is missing or incomplete."""
