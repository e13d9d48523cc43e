"""The task mix: which task gets the next rollout slot, following configured (or automatic) ratios.

Picks use smooth weighted round robin (nginx's upstream algorithm): every pick adds each eligible
task's weight to its credit, takes the task with the most credit and charges it the total. Over
any window the picks follow the weights to within one pick per task, with no history to unwind
when weights change live. Since every admitted rollout completes, completions follow the same
ratios (a slow task holds more of the in-flight slots, as it must).

Automatic mode scales each weight by how often the task's recent groups disagree (non-zero
reward variance: the only groups that carry a GRPO signal), never below ``floor`` of it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

from gymfleet.orchestrator.config import AutoMixConfig

MIN_GROUPS_FOR_AUTO = 4
"""Groups a task must complete before automatic mode trusts its estimate (until then: 1)."""


class TaskMix:
    """Chooses the next task.

    Args:
        weights: configured weight per task name (>= 0).
        auto: automatic mode settings.
    """

    def __init__(self, weights: dict[str, float], auto: AutoMixConfig | None = None) -> None:
        self.auto = auto or AutoMixConfig()
        self.weights: dict[str, float] = {}
        self.credit: dict[str, float] = {}
        self.recent: dict[str, deque[bool]] = {}
        self.set_weights(weights)

    def set_weights(self, weights: dict[str, float]) -> None:
        """Replaces the configured weights (live; credit carries over so there is no burst)."""
        for name, weight in weights.items():
            if weight < 0:
                raise ValueError(f"task {name!r}: weight must be >= 0, got {weight}")
        self.weights = dict(weights)
        for name in weights:
            self.credit.setdefault(name, 0.0)
            self.recent.setdefault(name, deque(maxlen=self.auto.window_groups))

    def set_auto(self, auto: AutoMixConfig) -> None:
        """Switches automatic mode on or off, or changes its settings, live."""
        self.auto = auto
        for name, window in self.recent.items():
            self.recent[name] = deque(window, maxlen=auto.window_groups)

    def record_group(self, task: str, rewards: Iterable[float]) -> None:
        """Called when a group of ``task`` completes, with its samples' rewards."""
        values = np.asarray(list(rewards), dtype=np.float64)
        if task in self.recent and len(values):
            self.recent[task].append(bool(values.std() > 1e-9))

    def disagreement(self, task: str) -> float | None:
        """Fraction of the task's recent groups with non-zero reward variance (None: too few)."""
        window = self.recent.get(task)
        if window is None or len(window) < min(MIN_GROUPS_FOR_AUTO, self.auto.window_groups):
            return None
        return sum(window) / len(window)

    def effective_weight(self, task: str) -> float:
        """The weight picks follow: configured, scaled by disagreement in automatic mode."""
        weight = self.weights.get(task, 0.0)
        if not self.auto.enabled:
            return weight
        d = self.disagreement(task)
        return weight * (1.0 if d is None else self.auto.floor + (1.0 - self.auto.floor) * d)

    def pick(self, eligible: Iterable[str]) -> str | None:
        """The next task among ``eligible`` (those with work and a free slot); None if none."""
        names = list(eligible)
        weights = [self.effective_weight(n) for n in names]
        if not any(w > 0 for w in weights):  # automatic mode zeroed everyone (floor 0): fall back
            weights = [self.weights.get(n, 0.0) for n in names]
        best, best_credit, total = None, 0.0, 0.0
        for name, weight in zip(names, weights, strict=True):
            if weight <= 0:
                continue
            total += weight
            credit = self.credit[name] + weight
            self.credit[name] = credit
            if best is None or credit > best_credit:
                best, best_credit = name, credit
        if best is not None:
            self.credit[best] -= total
        return best
