"""Admission: when the scheduler may start a rollout or create a group, one policy fed by the learner's progress.

Three rules, one bound ``max_staleness`` (``s``):

* **staleness gate** (:meth:`Admission.stale`): no rollout starts while one in flight already
  lags the served policy version by more than ``s`` (its samples would be dropped);
* **ahead budget** (:meth:`Admission.may_create`, :meth:`Admission.created`): with
  ``groups_per_step`` ``G`` set (a training run), at most ``(s + 1 + steps) * G`` groups are
  created after the learner took ``steps`` steps, plus the groups its dynamic-sampling refills
  asked for: AReaL's staleness-aware admission (Fu et al. 2025, "AReaL", sec. 5.1: at most
  ``(i + eta + 1) * B`` trajectories at policy version ``i``). Without it generation outruns a
  slower learner and the extra groups go stale and are dropped (measured on the slow-step
  terminal task: 106 rollouts generated, 46 samples trained, 50 dropped as stale in 5 steps;
  docs/train.md);
* **lock-step** is the same policy with ``s = 0``: one step's groups, then the next once the
  learner has claimed them (``gymfleet train`` with ``mode: sync``).

The learner's progress reaches it as a :class:`LearnerProgress` record
(:meth:`gymfleet.run.learner.LearnerHandle.progress`), handed on through
:meth:`~gymfleet.orchestrator.scheduler.Scheduler.learner_progressed`. A collection run has the
gate only (``groups_per_step`` None); ``s`` None turns every rule off.
"""

from __future__ import annotations

from dataclasses import dataclass

from gymfleet.core.records import staleness

STARVED_S = 30.0
"""Seconds without a learner step, nothing in flight, the ahead budget spent and a task
quarantined, before one more step's groups may be created (:meth:`Admission.unstarve`)."""


@dataclass(frozen=True)
class LearnerProgress:
    """What the learner has done so far, as admission counts it (both counters only grow)."""

    steps: int = 0
    """Learner steps that claimed their groups (a step claims before it trains and publishes)."""
    extra_groups: int = 0
    """Groups the learner's refills asked for beyond its steps' first claims (dynamic sampling)."""


class Admission:
    """The scheduler's admission policy (see the module docstring).

    Args:
        max_staleness: ``s``, the gate's bound and the ahead budget's steps (None: no bound).
        groups_per_step: ``G``, groups one learner step trains on; None: no ahead budget (collection).
    """

    def __init__(self, max_staleness: int | None, groups_per_step: int | None = None) -> None:
        self.max_staleness, self.groups_per_step = max_staleness, groups_per_step
        self.progress = LearnerProgress()
        self.last_step_at: float | None = None
        """``time.monotonic()`` of the last step the learner took (None: none yet, counted from the first look)."""
        self.group_budget: int | None = (None if max_staleness is None or groups_per_step is None
                                         else (max_staleness + 1) * groups_per_step)
        """Groups still to create; None: unbounded."""

    def stale(self, serving_version: int, oldest_in_flight: int | None) -> bool:
        """The staleness gate: True while a rollout in flight, started on ``oldest_in_flight``,
        lags the served ``serving_version`` by more than ``max_staleness`` versions."""
        if self.max_staleness is None or oldest_in_flight is None:
            return False
        return staleness(serving_version, oldest_in_flight) > self.max_staleness

    def may_create(self, first_claim: bool) -> bool:
        """Whether a task may ask the store for new groups (``first_claim``: its first ask, which
        may pick up groups a previous start created, whatever the budget)."""
        return self.group_budget is None or self.group_budget > 0 or first_claim

    def created(self, n_groups: int) -> None:
        """Counts ``n_groups`` new groups against the budget."""
        if self.group_budget is not None:
            self.group_budget -= n_groups

    def grant(self, n_groups: int) -> None:
        """Lets ``n_groups`` more groups be created (turns the budget on if it was off)."""
        self.group_budget = (self.group_budget or 0) + n_groups

    def progressed(self, progress: LearnerProgress, now: float) -> int:
        """Takes the learner's newest counters; grants ``G`` groups per new step and the groups
        its refills asked for. Returns the groups granted (0: nothing new)."""
        old, self.progress = self.progress, LearnerProgress(max(self.progress.steps, progress.steps),
                                                            max(self.progress.extra_groups, progress.extra_groups))
        if self.last_step_at is None or self.progress.steps > old.steps:
            self.last_step_at = now
        if self.group_budget is None or self.groups_per_step is None:
            return 0
        more = ((self.progress.steps - old.steps) * self.groups_per_step
                + self.progress.extra_groups - old.extra_groups)
        if more:
            self.grant(more)
        return more

    def unstarve(self, in_flight: int, any_quarantined: bool, now: float) -> int:
        """Groups handed to a task that is then quarantined never complete, so the learner could
        wait for ever on groups no one generates: with the budget spent, nothing in flight and a
        task quarantined for :data:`STARVED_S` without a learner step, grants one step's groups.
        Returns the groups granted."""
        if (self.group_budget != 0 or self.groups_per_step is None or in_flight or not any_quarantined
                or self.last_step_at is None or now - self.last_step_at < STARVED_S):
            return 0
        self.last_step_at = now
        self.grant(self.groups_per_step)
        return self.groups_per_step
