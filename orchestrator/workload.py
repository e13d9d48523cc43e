"""The work of one task in a run: its groups, the samples it holds to run, and its health.

Groups are created lazily, instance after instance (``passes`` times over the list), with ids
that depend only on the run, task, pass and instance: a restarted run recognises the groups it
already holds and continues after them, and several orchestrators on one run create each group
once (creation is idempotent), so nothing is skipped and nothing is run twice. Samples come from
the store in claimed batches (leased to this orchestrator, ``store/leases.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from itertools import chain, count

from gymfleet.orchestrator.config import TaskConfig
from gymfleet.orchestrator.store import GroupSpec, SampleRef


def group_id_of(run_id: str, task: str, pass_idx: int, instance_id: str) -> str:
    """The deterministic id of one group."""
    return f"{run_id}/{task}/p{pass_idx}/{instance_id}"


class TaskWork:
    """Pending samples and counters of one task.

    Args:
        cfg: the task's config.
        run_id: the run.
        instance_ids: the instances to run, in order.
        existing_groups: groups the run already holds (never created again).
        requeued: samples already leased to this orchestrator, run first.
    """

    def __init__(
        self,
        cfg: TaskConfig,
        run_id: str,
        instance_ids: list[str],
        existing_groups: set[str],
        requeued: list[SampleRef] | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_id = run_id
        self.instance_ids = instance_ids
        self.pending: deque[SampleRef] = deque(requeued or [])
        """Samples leased to this orchestrator, not started yet."""
        self._groups = self._enumerate(existing_groups)
        self._lookahead = next(self._groups, None)
        self.retry_at = 0.0
        """``time.monotonic()`` before which the store is not asked again (it had nothing)."""
        self.drained = False
        """The store has nothing left for this task: no group to create, no sample open anywhere."""
        self.n_refills = 0
        self.in_flight = 0
        self.consecutive_infra = 0
        self.quarantined: str | None = None
        """Why the task was quarantined (None: it is healthy)."""
        self.infra_attempts: dict[str, int] = {}
        self.group_rewards: dict[str, dict[int, float]] = {}

    @property
    def name(self) -> str:
        return self.cfg.name

    def _enumerate(self, existing: set[str]) -> Iterator[GroupSpec]:
        if not self.instance_ids:
            return
        passes = range(self.cfg.passes) if self.cfg.passes is not None else count()
        for pass_idx in passes:
            for instance_id in self.instance_ids:
                group_id = group_id_of(self.run_id, self.name, pass_idx, instance_id)
                if group_id not in existing:
                    yield GroupSpec(group_id, self.run_id, self.name, self.cfg.registered_id, instance_id,
                                    self.cfg.group_size)

    def has_work(self) -> bool:
        """Samples held, or possibly more in the store (and not quarantined)."""
        return self.quarantined is None and (bool(self.pending) or not self.drained)

    def eligible(self, now: float) -> bool:
        """Has work ready (held, or worth asking the store for at ``now``, a monotonic time) and a
        free per-task slot."""
        cap = self.cfg.max_in_flight
        return (self.has_work() and (cap is None or self.in_flight < cap)
                and (bool(self.pending) or now >= self.retry_at))

    @property
    def exhausted(self) -> bool:
        """Every group of the task was handed out for creation."""
        return self._lookahead is None

    def next_groups(self, n_samples: int, max_groups: int | None = None) -> list[GroupSpec]:
        """The next groups to create, enough for ``n_samples`` (at most ``max_groups``)."""
        k = -(-n_samples // self.cfg.group_size)
        if max_groups is not None:
            k = min(k, max_groups)
        out: list[GroupSpec] = []
        while len(out) < k and self._lookahead is not None:
            out.append(self._lookahead)
            self._lookahead = next(self._groups, None)
        return out

    def give_back(self, groups: list[GroupSpec]) -> None:
        """Puts groups :meth:`next_groups` handed out back first (their creation failed)."""
        if groups:
            rest = self._groups if self._lookahead is None else chain([self._lookahead], self._groups)
            self._groups = chain(groups[1:], rest)
            self._lookahead = groups[0]

    def take(self) -> SampleRef:
        """The next held sample to run.

        Raises:
            IndexError: none held (refill from the store first).
        """
        return self.pending.popleft()

    def requeue(self, sample: SampleRef) -> None:
        """Runs ``sample`` again next (after an infrastructure failure), as its next attempt."""
        self.infra_attempts[sample.sample_id] = self.infra_attempts.get(sample.sample_id, 0) + 1
        self.pending.appendleft(replace(sample, n_attempts=sample.n_attempts + 1))

    def may_retry(self, sample: SampleRef) -> bool:
        """Whether an infrastructure failure of ``sample`` gets another attempt."""
        return self.infra_attempts.get(sample.sample_id, 0) + 1 < self.cfg.max_attempts

    def record_final(self, sample: SampleRef, reward: float) -> list[float] | None:
        """Notes a sample's final reward; returns the group's rewards once all G are in."""
        rewards = self.group_rewards.setdefault(sample.group_id, {})
        rewards[sample.sample_idx] = reward
        if len(rewards) < self.cfg.group_size:
            return None
        del self.group_rewards[sample.group_id]
        return [rewards[i] for i in sorted(rewards)]

    def quarantine(self, reason: str) -> None:
        """Stops admitting this task; held samples stay in the store for a restart."""
        self.quarantined = reason
        self.pending.clear()
        self._lookahead = None
