"""Errors raised by gymfleet.orchestrator (the store's own live in ``store/errors.py``, the
inference layer's in ``engines/errors.py``).

Class tree (the whole tree is drawn in ``gymfleet/core/errors.py``)::

    GymfleetError            (gymfleet/core/errors.py)
    ├── ConfigError          a run config that cannot be used (gymfleet/core/errors.py)
    └── InferenceError
        ├── PolicyError      the policy produced something unusable -> rollout status policy_error
        └── EngineError      an inference engine failed or is unreachable -> infra_error

A rollout never raises these to the scheduler: ``rollout.py`` classifies every failure at the
boundary and records it on the trajectory (status and reason).
"""

from __future__ import annotations

from gymfleet.core.errors import InferenceError

__all__ = ["EngineError", "PolicyError"]


class PolicyError(InferenceError):
    """The policy's own failure (e.g. it overflowed the context window); recorded as policy_error."""


class EngineError(InferenceError):
    """An inference engine failed or could not be reached; recorded as infra_error, never trained on."""
