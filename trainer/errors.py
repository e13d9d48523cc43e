"""Errors raised by gymfleet.trainer (the learner side).

Class tree (under :class:`gymfleet.core.errors.GymfleetError`; the whole tree is drawn in
``gymfleet/core/errors.py``)::

    TrainError                  (gymfleet.core.errors: the roots are imported from there only)
    ├── BucketError             a bucket URL cannot be used, or a version is missing or incomplete
    │   └── BucketCorruptError  a committed version whose files do not read back (skipped, kept)
    └── RankLostError           a data-parallel rank died or stopped answering mid-step (the step fails)
"""

from __future__ import annotations

from gymfleet.core.errors import TrainError

__all__ = ["BucketCorruptError", "BucketError", "RankLostError"]


class BucketError(TrainError):
    """A bucket URL cannot be used, or a version is missing or incomplete."""


class BucketCorruptError(BucketError):
    """A committed version whose files do not read back: bad ``meta.json``, a file shorter or
    other than its manifest says, an unreadable learner state. Readers skip it (with a warning)
    for the previous committed version; nothing is deleted."""


class RankLostError(TrainError):
    """A rank of a data-parallel learner died or stopped answering during a step: the step is
    failed, nothing it trained is published, its groups stay unacknowledged (their claims expire
    or the next learner's seat gives them back), and a rerun resumes from the last published
    version."""
