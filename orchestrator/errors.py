"""Errors raised by gymfleet.orchestrator (the store's own live in ``store/errors.py``, the
inference layer's in ``engines/errors.py``).

Class tree (the whole tree is drawn in ``gymfleet/core/errors.py``)::

    GymfleetError (= OrchestratorError)
    ├── ConfigError          a run config that cannot be used (names the field and the fix)
    └── InferenceError
        ├── PolicyError      the policy produced something unusable -> rollout status policy_error
        └── EngineError      an inference engine failed or is unreachable -> infra_error

A rollout never raises these to the scheduler: ``rollout.py`` classifies every failure at the
boundary and records it on the trajectory (status and reason).
"""

from __future__ import annotations

from gymfleet.core.errors import ConfigError, GymfleetError, InferenceError

OrchestratorError = GymfleetError
"""Kept as a name: every orchestrator error is a GymfleetError."""

__all__ = ["ConfigError", "EngineError", "OrchestratorError", "PolicyError"]


class PolicyError(InferenceError):
    """The policy's own failure (e.g. it overflowed the context window); recorded as policy_error."""


class EngineError(InferenceError):
    """An inference engine failed or could not be reached; recorded as infra_error, never trained on."""
