"""Errors raised by gymfleet.orchestrator (the store's own live in ``store/errors.py``).

Class tree::

    OrchestratorError
    ├── ConfigError          a run config that cannot be used (names the field and the fix)
    ├── PolicyError          the policy produced something unusable -> rollout status policy_error
    └── EngineError          an inference engine failed or is unreachable -> infra_error

A rollout never raises these to the scheduler: ``rollout.py`` classifies every failure at the
boundary and records it on the trajectory (status and reason).
"""

from __future__ import annotations


class OrchestratorError(Exception):
    """Base class of every orchestrator error."""


class ConfigError(OrchestratorError, ValueError):
    """A run config that cannot be used; the message names the field and the fix."""


class PolicyError(OrchestratorError):
    """The policy's own failure (e.g. it overflowed the context window); recorded as policy_error."""


class EngineError(OrchestratorError):
    """An inference engine failed or could not be reached; recorded as infra_error, never trained on."""
