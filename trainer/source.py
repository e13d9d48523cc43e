"""StoreGroupSource: the learner's :class:`~gymfleet.trainer.signal.GroupSource` over the trajectory store."""

from __future__ import annotations

from dataclasses import dataclass, field

from gymfleet.core.records import ClaimedGroup
from gymfleet.orchestrator.store import TrajectoryStore


@dataclass
class StoreGroupSource:
    """Claims complete groups of one run from a :class:`TrajectoryStore`; acks them by id.

    Args:
        store: the run's store.
        run_id: only this run's groups.
        min_groups: a claim holding fewer groups is released at once and nothing is returned
            (sync mode waits for a whole step's worth; async takes what is there).

    Attributes:
        claimed: every group id this source handed out, in order (for reports and tests).
    """

    store: TrajectoryStore
    run_id: str
    min_groups: int = 1
    claimed: list[str] = field(default_factory=list)
    seated: str | None = None
    """The learner that took the run's seat through this source (its claims are fenced)."""

    async def take_seat(self, learner: str, lease_s: float) -> int:
        """Makes ``learner`` the run's one learner (called once at start-up, before resuming) and
        gives back the groups a dead predecessor held; returns how many.

        Raises:
            LearnerBusyError: another live learner trains the run.
        """
        released = await self.store.take_learner_seat(self.run_id, learner, lease_s)
        self.seated = learner
        return released

    async def leave_seat(self) -> None:
        """Gives the run's seat up (a clean stop), so that the next learner starts at once."""
        if self.seated is not None:
            await self.store.leave_learner_seat(self.run_id, self.seated)
            self.seated = None

    async def claim_groups(self, n: int, claimer: str, lease_s: float) -> list[ClaimedGroup]:
        """Claims up to ``n`` complete groups (none when fewer than ``min_groups`` are ready).

        Raises:
            LearnerBusyError: ``claimer`` took the seat, and another learner has taken it since.
        """
        claim = await self.store.claim_groups(n, claimer, lease_s, self.run_id, fence=claimer == self.seated)
        if len(claim.groups) < min(self.min_groups, n):
            if claim.groups:
                await self.store.release(claim)
            return []
        self.claimed.extend(claim.group_ids)
        return list(claim.groups)

    async def ack_groups(self, group_ids: list[str], claimer: str) -> None:
        """Marks the groups consumed, whoever holds their claim now (idempotent)."""
        await self.store.consume_groups(list(group_ids))
