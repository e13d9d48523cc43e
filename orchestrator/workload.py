"""The work of one task in a run: its groups, the samples waiting to run, and its health.

Groups are created lazily, instance after instance (``passes`` times over the list), with ids
that depend only on the run, task, pass and instance: a restarted run recognises the groups it
already holds and continues after them, so nothing is skipped and nothing is run twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from itertools import count

from gymfleet.orchestrator.config import TaskConfig
from gymfleet.orchestrator.store import GroupSpec, SampleRef, TrajectoryStore


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
        requeued: samples a restart found pending, run first.
    """

    def __init__(
        self,
        cfg: TaskConfig,
        run_id: str,
        instance_ids: list[str],
        existing_groups: set[str],
        requeued: list[SampleRef],
    ) -> None:
        self.cfg = cfg
        self.run_id = run_id
        self.instance_ids = instance_ids
        self.pending: deque[SampleRef] = deque(requeued)
        self._groups = self._enumerate(existing_groups)
        self._lookahead = next(self._groups, None)
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
        """Samples pending, or groups still to create (and not quarantined)."""
        return self.quarantined is None and (bool(self.pending) or self._lookahead is not None)

    def eligible(self) -> bool:
        """Has work and a free per-task slot."""
        cap = self.cfg.max_in_flight
        return self.has_work() and (cap is None or self.in_flight < cap)

    def take(self, store: TrajectoryStore) -> SampleRef:
        """The next sample to run; creates the next group (a queued store write) when needed.

        Raises:
            IndexError: no work left (check :meth:`has_work` first).
        """
        if not self.pending:
            group = self._lookahead
            if group is None:
                raise IndexError(f"task {self.name} has no work left")
            self._lookahead = next(self._groups, None)
            store.create_group(group)
            self.pending.extend(
                SampleRef(sid, group.group_id, i, self.run_id, self.name, group.env_id, group.instance_id)
                for i, sid in enumerate(group.sample_ids())
            )
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
        """Stops admitting this task; pending samples stay in the store for a restart."""
        self.quarantined = reason
        self.pending.clear()
        self._lookahead = None
