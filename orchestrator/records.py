"""The records the orchestrator passes around, defined in :mod:`gymfleet.core.records`.

Kept as an import path for code written against ``gymfleet.orchestrator.records``; new code
imports from ``gymfleet.core.records``.
"""

from gymfleet.core.records import Generation, Message, RolloutStatus, SamplingParams, Trajectory

__all__ = ["Generation", "Message", "RolloutStatus", "SamplingParams", "Trajectory"]
