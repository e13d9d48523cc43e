"""The claimer: gets a scheduler its samples from the store in leased batches and keeps them leased.

Several schedulers (processes) may share one run on PostgreSQL: each sample is claimed by exactly
one of them (``store/leases.py``), a heartbeat renews what this one holds, and a task whose
remaining samples are all held by peers is asked about again every ``poll_s``, so that the
samples of a peer that died come back here once its lease runs out.
"""

from __future__ import annotations

import asyncio
import logging
import time

from gymfleet.orchestrator.config import RunConfig
from gymfleet.orchestrator.protocols import SampleLeases
from gymfleet.orchestrator.store import GroupSpec, new_owner
from gymfleet.orchestrator.store.engine import summarise_db_error
from gymfleet.orchestrator.store.writer import store_full_error, store_is_full
from gymfleet.orchestrator.workload import TaskWork

log = logging.getLogger(__name__)

CLAIM_BATCH = 256
"""Most samples one claim takes (at most ``max_in_flight``): large enough that a full scheduler
claims rarely (one transaction per batch, not per sample; a claim holds admission up), small
enough that peers on one run share the tail of the work."""
MAX_POLL_S = 1.0


class SampleClaimer:
    """Claims and renews one scheduler's samples.

    Args:
        store: the run's store (a TrajectoryStore).
        config: the run (``run_id``, ``lease_s``, ``max_in_flight``).
    """

    def __init__(self, store: SampleLeases, config: RunConfig) -> None:
        self.store = store
        self.config = config
        self.owner = new_owner()
        """Who this scheduler is to the store's leases (``host:pid:token``)."""
        self._requeue_at = 0.0
        """``time.monotonic()`` after which a claim looks for peers' expired samples again."""

    @property
    def poll_s(self) -> float:
        """Seconds before asking the store again about a task it had nothing of."""
        return min(MAX_POLL_S, self.config.lease_s / 3)

    async def refill(self, work: TaskWork, group_budget: int | None) -> int:
        """Claims a batch of ``work``'s samples into ``work.pending``, creating groups when short.

        Called by the scheduler when it picked the task and holds none of its samples. When the
        store has none, sets ``work.retry_at`` (peers hold the rest, or the budget holds new
        groups back) or ``work.drained`` (nothing left anywhere). A database error is logged
        and the task asked about again after ``poll_s``.

        Args:
            group_budget: most groups to create (None: no bound).

        Returns:
            How many groups were handed out for creation (to count against the budget).

        Raises:
            StoreWriteError: the store cannot take any more writes (disk full, read-only): the run
                should stop, as when the writer finds it.
        """
        handed: list[GroupSpec] = []

        def next_groups(n_samples: int) -> list[GroupSpec]:
            limit = None if group_budget is None else max(0, group_budget - len(handed))
            groups = work.next_groups(n_samples, limit)
            handed.extend(groups)
            return groups

        caps = [CLAIM_BATCH, self.config.max_in_flight] + ([work.cfg.max_in_flight] if work.cfg.max_in_flight else [])
        n = max(work.cfg.group_size, min(caps))
        work.n_refills += 1
        requeue = time.monotonic() >= self._requeue_at  # not on every claim: it reads every running sample
        try:
            claim = await self.store.claim_samples(self.config.run_id, work.name, self.owner, n,
                                                   self.config.lease_s, next_groups, requeue)
        except Exception as exc:  # the database hiccuped: the groups come back, ask again soon
            work.give_back(handed)
            if store_is_full(exc):
                raise store_full_error(exc) from exc
            work.retry_at = time.monotonic() + self.poll_s
            log.warning("claiming samples of task %s failed (%s); trying again in %g s", work.name,
                        summarise_db_error(exc), self.poll_s)
            return 0
        if requeue:
            self._requeue_at = time.monotonic() + self.poll_s
        work.pending.extend(claim.samples)
        if claim.samples:
            work.retry_at = 0.0
        elif work.exhausted and not claim.n_open_elsewhere:
            work.drained = True
        else:
            work.retry_at = time.monotonic() + self.poll_s
        return len(handed)

    async def heartbeat(self) -> None:
        """Renews this scheduler's leases every ``lease_s / 3`` seconds until cancelled."""
        every_s = self.config.lease_s / 3
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.store.renew_leases(self.config.run_id, self.owner, self.config.lease_s)
            except Exception as exc:  # a missed beat is survivable: the lease outlasts 3 beats
                log.warning("renewing leases failed (%s); trying again in %g s", summarise_db_error(exc), every_s)

    async def release(self) -> None:
        """Gives back what this scheduler holds and has not started (at the end of its run)."""
        await self.store.release_leases(self.config.run_id, self.owner)
