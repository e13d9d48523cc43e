"""Start-up parity check: each replica's logprobs of its own probe generation against the learner's.

TITO makes the learner train on exactly the tokens a replica sampled; it cannot make the
learner's forward pass give those tokens the probabilities the replica sampled them with. A
replica serving in bfloat16 against a float32 learner (ratios 0.83-1.16 on the same tokens with
SmolLM2-135M), one left in vLLM's default ``raw_logprobs`` mode (logprobs before temperature and
top-p), or one that ignores the sampling parameters, shifts every importance ratio before the
first step, and the ratio band then masks or mis-weights tokens silently.

So when a run starts, the gateway asks each HTTP replica for a short probe generation (base
model, the run's temperature and top-p), scores the same tokens with the learner's own
:func:`~gymfleet.core.sampling.token_logprobs` on the learner's model and dtype,
and reports mean and max ``|Δlogprob|`` and the ratio range ``exp(learner - replica)``. Above
``max_abs_delta`` the run refuses to start (or warns, by config), naming the likely cause.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import Field

from gymfleet.core.strict import StrictModel
from gymfleet.orchestrator.engines.errors import ParityError
from gymfleet.orchestrator.protocols import Engine
from gymfleet.core.records import Generation, Message, SamplingParams

log = logging.getLogger(__name__)

PROBE_MESSAGES = [
    Message("system", "You are a helpful assistant."),
    Message("user", "Describe a harbour at dawn in three sentences."),
]
"""The probe's conversation: ordinary chat, long enough an answer to visit many tokens."""


class ParityConfig(StrictModel):
    """The start-up train/inference parity check (module docstring)."""

    enabled: bool = True
    """Check every HTTP replica (vLLM, ``gymfleet serve``) when the run starts. In-process
    replicas compute logprobs with the learner's own function and model and are not probed."""
    max_abs_delta: float = Field(0.05, gt=0)
    """Largest allowed ``|Δlogprob|`` on any probe token: 0.05 keeps each ratio within
    [0.951, 1.051], well inside the learner's ratio band. float32 vLLM on CPU measures ~3e-4,
    bfloat16 ~0.2."""
    on_mismatch: Literal["refuse", "warn"] = "refuse"
    """refuse: the run does not start (one-line error); warn: log it and go on."""
    probe_tokens: int = Field(32, ge=4)
    """Tokens each replica generates for the probe."""
    seed: int = 0
    """The probe's sampling seed."""
    dtype: str = "float32"
    """The learner's dtype, in which the probe is scored."""


@dataclass(frozen=True)
class ParityReport:
    """What the probe of one replica found.

    Attributes:
        replica: its name.
        n_tokens: probe tokens compared.
        mean_abs_delta: mean of ``|learner - replica|`` logprob over those tokens (nats).
        max_abs_delta: the largest (nats).
        ratio_min: smallest importance ratio ``exp(learner - replica)``.
        ratio_max: largest.
        bound: the configured ``max_abs_delta``.
        likely_cause: when over the bound, what most likely causes it and the fix.
    """

    replica: str
    n_tokens: int
    mean_abs_delta: float
    max_abs_delta: float
    ratio_min: float
    ratio_max: float
    bound: float
    likely_cause: str | None = None

    @property
    def passed(self) -> bool:
        """Whether the largest difference is within the bound."""
        return self.max_abs_delta <= self.bound

    def summary(self) -> str:
        """One line: the figures, and the likely cause when over the bound."""
        line = (f"replica {self.replica}: {self.n_tokens} probe tokens, |Δlogprob| mean {self.mean_abs_delta:.2e} "
                f"max {self.max_abs_delta:.2e} (bound {self.bound:g}), ratio {self.ratio_min:.4f}-{self.ratio_max:.4f}")
        return line if self.passed else f"{line}; likely cause: {self.likely_cause}"


class LogprobScorer(Protocol):
    """The learner's side of the comparison."""

    def score(self, token_ids: list[int], n_prompt: int, temperature: float, top_p: float) -> list[float]:
        """Called once per replica (twice when diagnosing): the learner's logprob of each token
        ``token_ids[n_prompt:]`` given the tokens before it, under ``(temperature, top_p)``."""
        ...


class LearnerScorer:
    """A :class:`LogprobScorer` on the learner's model, through the learner's ``token_logprobs``.

    Args:
        model: a causal LM (the learner's base model, in the learner's dtype).
    """

    def __init__(self, model: Any) -> None:
        self.model = model

    def score(self, token_ids: list[int], n_prompt: int, temperature: float, top_p: float) -> list[float]:
        import torch

        from gymfleet.core.sampling import token_logprobs

        ids = torch.tensor([token_ids], device=self.model.device)
        with torch.no_grad():
            logits = self.model(input_ids=ids).logits[0, n_prompt - 1 : -1]
            return token_logprobs(logits, ids[0, n_prompt:], temperature, top_p).tolist()


def compare(replica: str, prompt_ids: list[int], generation: Generation, scorer: LogprobScorer,
            sampling: SamplingParams, bound: float, dtype: str = "float32") -> ParityReport:
    """Scores a replica's generation with the learner and diagnoses a mismatch.

    Args:
        dtype: the learner's dtype (named in the dtype diagnosis).

    Raises:
        ParityError: the replica generated nothing to compare.
    """
    if not generation.token_ids:
        raise ParityError(f"replica {replica}: the probe generated no tokens; cannot check parity")
    ids = list(prompt_ids) + list(generation.token_ids)
    learner = scorer.score(ids, len(prompt_ids), sampling.temperature, sampling.top_p)
    deltas = [a - b for a, b in zip(learner, generation.logprobs)]
    finite = [d for d in deltas if math.isfinite(d)]
    abs_deltas = [abs(d) if math.isfinite(d) else math.inf for d in deltas]
    report = ParityReport(
        replica=replica, n_tokens=len(deltas), mean_abs_delta=sum(abs_deltas) / len(deltas),
        max_abs_delta=max(abs_deltas), ratio_min=math.exp(min(finite)) if finite else 0.0,
        ratio_max=math.exp(max(finite)) if finite else 0.0, bound=bound,
    )
    if report.passed:
        return report
    cause = likely_cause(ids, len(prompt_ids), generation, learner, scorer, sampling, dtype)
    return dataclasses.replace(report, likely_cause=cause)


def likely_cause(ids: list[int], n_prompt: int, generation: Generation, learner: list[float],
                 scorer: LogprobScorer, sampling: SamplingParams, dtype: str = "float32") -> str:
    """The most likely reason a replica's logprobs differ from the learner's, with its fix.

    In order: tokens the learner's nucleus excludes (sampling params); a better fit of the
    learner's temperature-1, untruncated logprobs (raw logprobs mode); a gap too large for
    rounding (other weights); else numerical precision (dtype).
    """
    replica = list(generation.logprobs)
    if any(math.isinf(x) for x in learner):
        return (f"sampling params: the replica sampled tokens outside the learner's top_p={sampling.top_p} nucleus "
                f"at temperature {sampling.temperature} (it ignores or overrides temperature/top_p)")
    processed_gap = _mean_gap(learner, replica)
    if (sampling.temperature, sampling.top_p) not in {(1.0, 1.0), (0.0, 1.0)}:
        raw = scorer.score(ids, n_prompt, 1.0, 1.0)
        if _mean_gap(raw, replica) < 0.5 * processed_gap:
            return ("logprobs mode: the replica reports logprobs before temperature and top-p (vLLM's default "
                    "raw_logprobs); start it with --logprobs-mode processed_logprobs")
    if processed_gap > 0.5:
        return ("model: the replica serves other weights than the learner scores (check its --model, and that no "
                "adapter is merged into the base)")
    return (f"dtype: numerical drift of lower-precision serving (bfloat16/float16 against a {dtype} learner "
            f"looks like this); serve with --dtype {dtype}, or raise policy.parity.max_abs_delta knowingly")


def _mean_gap(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b)) / max(len(a), 1)


async def probe(engine: Engine, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
    """One probe generation on one replica (base model, no routing key)."""
    return await engine.generate(prompt_ids, sampling, adapter=None, routing_key=None)


async def check_parity(replicas: list[Engine], prompt_ids: list[int], scorer: LogprobScorer,
                       sampling: SamplingParams, config: ParityConfig) -> list[ParityReport]:
    """Probes every replica and compares it with the learner.

    Args:
        replicas: the engines to check (each is called directly, not through the router).
        prompt_ids: the probe prompt's token ids (see :data:`PROBE_MESSAGES`).
        scorer: the learner's logprobs.
        sampling: the run's sampling; ``max_new_tokens`` and ``seed`` come from ``config``.
        config: the bound and what to do above it.

    Returns:
        One report per replica (logged at INFO, or WARNING when over the bound).

    Raises:
        ParityError: a replica is over the bound and ``on_mismatch`` is ``refuse`` (the message
            has every failing replica's figures and likely cause).
    """
    sampling = sampling.model_copy(update={"max_new_tokens": config.probe_tokens, "seed": config.seed, "stop": []})
    reports = []
    for engine in replicas:
        generation = await probe(engine, prompt_ids, sampling)
        report = compare(engine.name, prompt_ids, generation, scorer, sampling, config.max_abs_delta, config.dtype)
        (log.info if report.passed else log.warning)("parity check: %s", report.summary())
        reports.append(report)
    failed = [r for r in reports if not r.passed]
    if failed and config.on_mismatch == "refuse":
        raise ParityError(
            "train/inference mismatch above the bound, the run does not start: "
            + "; ".join(r.summary() for r in failed)
            + " (set policy.parity.on_mismatch: warn to start anyway)"
        )
    return reports
