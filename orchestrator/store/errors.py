"""Errors raised by the trajectory store.

Class tree (under :class:`gymfleet.core.errors.GymfleetError`; the whole tree is drawn in
``gymfleet/core/errors.py``)::

    StoreError                  = gymfleet.core.errors.StoreError, base of every store error
    ├── StoreURLError           an unsupported store URL or schema name
    ├── StoreOpenError          the database cannot be reached or created (server down, path not writable)
    ├── StoreClosedError        the store was used after close()
    ├── StoreWriteError         a write failed; the message names the rollout and the cause
    ├── ClaimExpiredError       ack/release of a claim that expired and was re-claimed
    ├── RunBusyError            a SQLite run another live orchestrator holds (use PostgreSQL for several)
    ├── LearnerBusyError        a run another live learner trains (one learner per run)
    └── RunNotFoundError        a run id the store does not hold (lists the known ones)
"""

from __future__ import annotations

from gymfleet.core.errors import StoreError

__all__ = [
    "ClaimExpiredError", "LearnerBusyError", "RunBusyError", "RunNotFoundError", "StoreClosedError", "StoreOpenError",
    "StoreURLError", "StoreWriteError",
]


class StoreURLError(StoreError, ValueError):
    """An unsupported store URL: use sqlite:///PATH or postgresql://USER:PASS@HOST/DB."""


class StoreOpenError(StoreError):
    """The database cannot be reached or created (server down, bad credentials, path not writable)."""


class StoreClosedError(StoreError):
    """The store was used after ``close()``: open a new one with ``TrajectoryStore.open``."""


class StoreWriteError(StoreError):
    """One write (one rollout) failed; other rollouts of its batch are unaffected."""


class ClaimExpiredError(StoreError):
    """The claim's lease ran out and the group went to another claimer: claim with a longer
    ``lease_s``, or renew before it expires."""


class RunBusyError(StoreError):
    """Another live orchestrator holds this SQLite run: SQLite takes one orchestrator per run; use
    a PostgreSQL store to run several on one run."""


class LearnerBusyError(StoreError):
    """Another live learner holds this run's seat: one learner trains a run; stop the other, or
    wait for its seat to lapse."""


class RunNotFoundError(StoreError, KeyError):
    """No run with this id in the store; the message lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
