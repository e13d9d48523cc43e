"""RolloutPolicy: what the rollouts were sampled from, which the learner must reproduce.

The learner does not own these values; the run does (``policy.model``, the tasks'
``sampling.temperature``/``top_p``, the run's ``max_staleness``), and
:meth:`gymfleet.run.config.TrainConfig.rollout_policy` hands them to the learner. Learner
logprobs are only comparable with the behaviour policy's when they are taken from the same
weights under the same sampling distribution (:func:`gymfleet.core.sampling.token_logprobs`).
"""

from __future__ import annotations

from pydantic import Field

from gymfleet.core.models import ModelSpec
from gymfleet.core.strict import StrictModel


class RolloutPolicy(StrictModel):
    """The behaviour policy's base model and sampling, and how stale a sample may be.

    Written into every published adapter's ``meta.json`` beside the learner's settings.
    """

    model: ModelSpec = Field(default_factory=ModelSpec)
    """The base model the engines serve and the adapter is trained for (its ``dtype`` and
    ``device``: how the learner holds the weights, ``learner.dtype``/``learner.device``)."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature of the rollouts (0: greedy; logprobs at temperature 1)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus mass of the rollouts; learner logprobs are taken after the same truncation."""
    max_staleness: int = Field(4, ge=0)
    """Most policy versions a sample may lag (:func:`gymfleet.core.records.staleness`: the
    learner's version minus the version that generated the sample's oldest token); staler
    samples are dropped."""
