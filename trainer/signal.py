"""Fills one learner step with groups that carry a gradient (GRPO's zero-variance groups, DAPO's
dynamic sampling).

A group whose rewards are all equal gets zero advantages
(:func:`gymfleet.trainer.loss.group_advantages`) and so no policy gradient. DAPO (Yu et al. 2025,
arXiv:2503.14476, §3.2 "Dynamic Sampling") keeps sampling and drops the groups whose accuracy is
0 or 1 until the batch is full of groups with signal. Here the learner keeps claiming complete
groups from the store until it holds ``groups_per_step`` groups with reward variance; the
zero-variance ones are acknowledged as consumed at once (never trained, never claimed again: they
would add nothing to any weights, so a crash before the next publish loses nothing by it). The
refill is bounded by ``max_extra_claims`` and ``max_wait_s``; past either the step trains on what
it has and the step's metrics say how many groups it was short.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pydantic import Field

from gymfleet.core.records import ClaimedGroup, Trajectory
from gymfleet.core.strict import StrictModel
from gymfleet.trainer.batch import GroupFilterStats, repair_groups

log = logging.getLogger(__name__)

REFILL_POLL_S = 0.2
"""Seconds between two refill claims that found no complete group."""


@runtime_checkable
class GroupSource(Protocol):
    """Where the learner gets complete groups (the trajectory store)."""

    async def claim_groups(self, n: int, claimer: str, lease_s: float) -> list[ClaimedGroup]:
        """Called once per step: atomically claims up to ``n`` complete, unconsumed groups."""
        ...

    async def ack_groups(self, group_ids: list[str], claimer: str) -> None:
        """Called after a publish committed: marks the groups consumed (idempotent)."""
        ...


class DynamicSamplingConfig(StrictModel):
    """Refilling a learner step with groups whose rewards vary (DAPO §3.2, arXiv:2503.14476)."""

    enabled: bool = True
    """Keep claiming groups until the step holds ``groups_per_step`` groups with reward variance;
    zero-variance groups are acknowledged untrained. False: every repaired group is trained (the
    zero-variance ones are still counted)."""
    max_extra_claims: int = Field(default=16, ge=0)
    """Most claims beyond the step's first that returned groups; then the step trains on what it has."""
    max_wait_s: float = Field(default=60.0, ge=0)
    """Most seconds one step spends refilling (waiting for groups to complete); then it trains on
    what it has."""


@dataclass
class StepGroups:
    """The groups one learner step claimed, sorted by what the step does with them.

    Attributes:
        trained: repaired groups (each back to its size) to train on.
        trained_ids: their group ids, in the same order.
        dropped_ids: groups :func:`repair_groups` dropped (too few trainable, fresh samples).
        zero_variance_ids: groups whose kept samples' rewards are all equal (trained or not).
        skipped_ids: the zero-variance groups left out of training (dynamic sampling on); they
            are acknowledged already.
        filter: what repair dropped, over every claimed group.
        claimed: every claimed group, in claim order.
        n_extra_claims: claims beyond the first that returned groups.
        n_groups_short: groups with variance the step lacks (0: a full step).
    """

    trained: list[list[Trajectory]] = field(default_factory=list)
    trained_ids: list[str] = field(default_factory=list)
    dropped_ids: list[str] = field(default_factory=list)
    zero_variance_ids: list[str] = field(default_factory=list)
    skipped_ids: list[str] = field(default_factory=list)
    filter: GroupFilterStats = field(default_factory=GroupFilterStats)
    claimed: list[ClaimedGroup] = field(default_factory=list)
    n_extra_claims: int = 0
    n_groups_short: int = 0


def has_variance(group: Sequence[Trajectory]) -> bool:
    """True when the group's rewards are not all equal (its advantages are not all zero)."""
    return len({t.reward for t in group}) > 1


def merge_stats(total: GroupFilterStats, more: GroupFilterStats) -> None:
    """Adds ``more``'s counts and staleness list to ``total`` (in place)."""
    total.groups_in += more.groups_in
    total.groups_dropped += more.groups_dropped
    total.samples_not_trainable += more.samples_not_trainable
    total.samples_stale += more.samples_stale
    total.samples_padded += more.samples_padded
    total.staleness.extend(more.staleness)


@dataclass
class StepClaimer:
    """Claims the groups of one learner step from a :class:`GroupSource`.

    Args:
        source: the store.
        claimer: the name claims are held under.
        groups_per_step: groups with variance a full step trains on.
        lease_s: seconds each claim holds.
        config: the refill bound (and whether to refill at all).
        on_refill: called with the number of groups still missing before each refill claim (the
            sync driver lets that many more groups start); None: nobody listens.
        should_stop: True once the learner was asked to stop: the refill ends at once (the step
            trains what it has) instead of waiting for groups generation no longer makes.
    """

    source: GroupSource
    claimer: str
    groups_per_step: int
    lease_s: float
    config: DynamicSamplingConfig = field(default_factory=lambda: DynamicSamplingConfig())
    on_refill: Callable[[int], None] | None = None
    should_stop: Callable[[], bool] | None = None

    async def claim_step(self, learner_version: int, max_staleness: int) -> StepGroups | None:
        """The step's groups: one claim, then refill claims while groups with variance are missing.

        Args:
            learner_version: the learner's policy version (for staleness).
            max_staleness: most versions a sample may lag.

        Returns:
            The sorted groups, or None when the first claim found no group.
        """
        first = await self.source.claim_groups(self.groups_per_step, self.claimer, self.lease_s)
        if not first:
            return None
        out = StepGroups()
        await self._sort(out, first, learner_version, max_staleness)
        deadline = time.monotonic() + self.config.max_wait_s
        asked = 0
        while (self.config.enabled and len(out.trained) < self.groups_per_step
               and out.n_extra_claims < self.config.max_extra_claims and time.monotonic() < deadline
               and not (self.should_stop is not None and self.should_stop())):
            missing = self.groups_per_step - len(out.trained)
            if self.on_refill is not None and missing > asked:
                self.on_refill(missing - asked)
                asked = missing
            more = await self.source.claim_groups(missing, self.claimer, self.lease_s)
            if not more:
                await asyncio.sleep(min(REFILL_POLL_S, max(deadline - time.monotonic(), 0.0)))
                continue
            out.n_extra_claims += 1
            asked -= len(more)
            await self._sort(out, more, learner_version, max_staleness)
        out.n_groups_short = max(self.groups_per_step - len(out.trained), 0) if self.config.enabled else 0
        if out.n_groups_short:
            log.warning(
                "step trains %d of %d groups: %d zero-variance and %d dropped groups were claimed and the refill "
                "stopped after %d extra claims / %.0f s (learner.dynamic_sampling.max_extra_claims / max_wait_s)",
                len(out.trained), self.groups_per_step, len(out.zero_variance_ids), len(out.dropped_ids),
                out.n_extra_claims, self.config.max_wait_s)
        return out

    async def _sort(self, out: StepGroups, claimed: list[ClaimedGroup], version: int, max_staleness: int) -> None:
        skipped = []
        for group in claimed:
            out.claimed.append(group)
            repaired, stats = repair_groups([group.trajectories], version, max_staleness)
            if not repaired:
                merge_stats(out.filter, stats)
                out.dropped_ids.append(group.group_id)
                continue
            if not has_variance(repaired[0]):
                out.zero_variance_ids.append(group.group_id)
                if self.config.enabled:
                    stats.staleness = []  # the histogram counts trained samples only
                    merge_stats(out.filter, stats)
                    skipped.append(group.group_id)
                    continue
            merge_stats(out.filter, stats)
            out.trained.append(repaired[0])
            out.trained_ids.append(group.group_id)
        if skipped:  # no gradient: consumed now, so that neither this learner nor another claims them again
            await self.source.ack_groups(skipped, self.claimer)
            out.skipped_ids.extend(skipped)
