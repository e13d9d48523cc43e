"""TrajectoryStore: the one object callers hold to write, claim, query and export trajectories."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from gymfleet.core.records import RolloutStatus, Trajectory
from gymfleet.orchestrator.store import bulk, claims, leases, queries, workqueue
from gymfleet.orchestrator.store.claims import Claim
from gymfleet.orchestrator.store.engine import create_store_engine, display_url, ensure_schema, summarise_db_error
from gymfleet.orchestrator.store.errors import StoreClosedError, StoreOpenError, StoreWriteError
from gymfleet.orchestrator.store.export import export_run
from gymfleet.orchestrator.store.migrate import upgrade
from gymfleet.orchestrator.store.queries import RunSummary, StoredTrajectory
from gymfleet.orchestrator.store.schema import RunStatus
from gymfleet.orchestrator.store.workqueue import GroupSpec, ResumeState, SampleClaim
from gymfleet.orchestrator.store.writer import BatchWriter


class TrajectoryStore:
    """Trajectories in SQL (SQLite by default, PostgreSQL by URL).

    Writes (``add``, ``create_group``, ``start_sample``) return at once and are applied in order by
    a background writer, many per transaction, each rollout whole in its own savepoint; ``flush``
    waits for them. Reads go straight to the database.

    Use ``async with await TrajectoryStore.open(url) as store:`` or call ``close()``.
    """

    def __init__(self, engine: AsyncEngine, writer: BatchWriter, url: str) -> None:
        self.engine = engine
        self.url = url
        self._writer = writer
        self._closed = False

    @classmethod
    async def open(cls, url: str, *, schema: str | None = None, max_batch: int = 256) -> Self:
        """Connects, brings the schema to Alembic head, and starts the writer.

        Args:
            url: ``sqlite:///PATH``, a bare path, or ``postgresql://USER:PASS@HOST/DB``.
            schema: PostgreSQL schema to use (created when missing).
            max_batch: most writes per transaction.

        Raises:
            StoreURLError: unsupported URL.
            StoreOpenError: the database cannot be reached or created.
        """
        try:
            engine = create_store_engine(url, schema=schema)
        except OSError as exc:  # the SQLite file's folder cannot be created
            raise StoreOpenError(f"cannot create the store {url}: {exc}; pass a writable path or URL") from exc
        try:
            await ensure_schema(engine, schema)
            await upgrade(engine)
        except (OSError, DBAPIError) as exc:
            await engine.dispose()
            where = engine.url.render_as_string(hide_password=True)
            raise StoreOpenError(
                f"cannot open the store {where}: {summarise_db_error(exc)}; "
                "check that the database server is running and the URL, user and password are right "
                "(or that the SQLite file is writable)"
            ) from exc
        except BaseException:
            await engine.dispose()
            raise
        writer = BatchWriter(engine, max_batch=max_batch)
        writer.start()
        return cls(engine, writer, url)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Writes what is queued, then disconnects. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._writer.close()
        finally:
            await self.engine.dispose()

    # ---- batched writes ---------------------------------------------------------------

    @property
    def fatal_error(self) -> StoreWriteError | None:
        """Set once a write failed because the database cannot take any more (disk full,
        read-only): the caller should stop the run; what was written is kept."""
        return self._writer.fatal

    def add(
        self, traj: Trajectory, *, sample_id: str | None = None, task: str = "", final: bool = True,
        keep_lease: bool = False,
    ) -> asyncio.Future[bool]:
        """Queues one finished rollout; it lands whole, in one transaction, or not at all.

        Args:
            traj: the trajectory.
            sample_id: the work-queue sample this attempt ran (None: no work queue).
            task: task name, for queries.
            final: the attempt finishes its sample (False sends the sample back to pending).
            keep_lease: with ``final=False``: the sample stays leased to its owner (who retries it).

        Returns:
            A future: True once committed and counted, False if stored but the sample had moved
            on; raises :class:`StoreWriteError` if the write failed (it is also logged).
        """
        return self._writer.submit(
            f"trajectory {traj.rollout_id} of run {traj.run_id}",
            lambda conn: workqueue.finish(conn, traj, sample_id=sample_id, task=task, final=final,
                                          keep_lease=keep_lease),
            bulk.Finish(traj, sample_id, task, final, keep_lease),
        )

    def create_group(self, group: GroupSpec) -> asyncio.Future[bool]:
        """Queues a group and its pending samples (no-op when it exists)."""
        return self._writer.submit(
            f"group {group.group_id}", lambda conn: workqueue.create_group(conn, group), bulk.CreateGroup(group)
        )

    def start_sample(self, sample_id: str, rollout_id: str) -> asyncio.Future[None]:
        """Queues marking a sample running under attempt ``rollout_id``."""
        return self._writer.submit(
            f"start {rollout_id}", lambda conn: workqueue.start_sample(conn, sample_id, rollout_id),
            bulk.StartSample(sample_id, rollout_id),
        )

    def quarantine(self, run_id: str, task: str) -> asyncio.Future[int]:
        """Queues parking a task's pending samples (a restart of the run requeues them)."""
        return self._writer.submit(f"quarantine {task}", lambda conn: workqueue.quarantine(conn, run_id, task))

    async def flush(self) -> None:
        """Waits until every queued write has committed or failed."""
        await self._writer.flush()

    @property
    def n_written(self) -> int:
        """Writes committed so far."""
        return self._writer.n_written

    @property
    def n_failed(self) -> int:
        """Writes that failed so far (each logged with its cause)."""
        return self._writer.n_failed

    # ---- runs ------------------------------------------------------------------------

    async def start_run(
        self, run_id: str, config: dict[str, Any], *, owner: str | None = None,
        lease_s: float = workqueue.DEFAULT_LEASE_S,
    ) -> ResumeState:
        """Creates the run or resumes it: samples in flight that nobody holds any more become
        aborted and pending again (see :func:`workqueue.start_run`).

        Args:
            owner: the starting orchestrator (:func:`leases.new_owner`); None: no leases.
            lease_s: seconds its leases hold unless renewed (:meth:`renew_leases`).

        Raises:
            RunBusyError: a SQLite store, and another live orchestrator holds the run.
        """
        self._check_open()
        await self.flush()
        async with self.engine.begin() as conn:
            return await workqueue.start_run(conn, run_id, config, owner=owner, lease_s=lease_s,
                                             url=display_url(self.url))

    async def claim_samples(
        self, run_id: str, task: str, owner: str, n: int, lease_s: float,
        next_groups: Callable[[int], list[GroupSpec]] | None = None, requeue: bool = True,
    ) -> SampleClaim:
        """Leases up to ``n`` pending samples of ``task`` to ``owner`` in one transaction, creating
        groups from ``next_groups`` when short (see :func:`workqueue.claim_samples`)."""
        self._check_open()
        async with self.engine.begin() as conn:
            return await workqueue.claim_samples(conn, run_id, task, owner, n, lease_s, next_groups, requeue)

    async def renew_leases(self, run_id: str, owner: str, lease_s: float) -> int:
        """Extends ``owner``'s leases on the run to ``lease_s`` seconds from now (the heartbeat);
        returns how many samples it holds."""
        self._check_open()
        async with self.engine.begin() as conn:
            return await leases.renew(conn, run_id, owner, lease_s)

    async def release_leases(self, run_id: str, owner: str) -> int:
        """Flushes, then gives back ``owner``'s unstarted samples and run lease (at the end of a
        run); returns how many samples."""
        await self.flush()
        async with self.engine.begin() as conn:
            return await leases.release(conn, run_id, owner)

    async def set_run_status(self, run_id: str, status: RunStatus) -> None:
        """Flushes, then records where the run stands."""
        await self.flush()
        async with self.engine.begin() as conn:
            await workqueue.set_run_status(conn, run_id, status)

    # ---- learner claims --------------------------------------------------------------

    async def take_learner_seat(self, run_id: str, learner: str, lease_s: float) -> int:
        """Makes ``learner`` the run's one learner; gives back what others hold (see
        :func:`claims.take_seat`). Raises LearnerBusyError while another live learner holds it."""
        self._check_open()
        async with self.engine.begin() as conn:
            return await claims.take_seat(conn, run_id, learner, lease_s)

    async def leave_learner_seat(self, run_id: str, learner: str) -> None:
        """Gives the run's seat up if ``learner`` holds it (see :func:`claims.leave_seat`)."""
        self._check_open()
        async with self.engine.begin() as conn:
            await claims.leave_seat(conn, run_id, learner)

    async def claim_groups(self, n: int, claimer: str, lease_s: float = 600.0, run_id: str | None = None,
                           *, fence: bool = False) -> Claim:
        """Atomically claims up to ``n`` complete groups (see :func:`claims.claim_groups`)."""
        self._check_open()
        async with self.engine.begin() as conn:
            return await claims.claim_groups(conn, n, claimer, lease_s, run_id, fence=fence)

    async def ack(self, claim: Claim) -> None:
        """Marks a claim's groups consumed. Raises ClaimExpiredError if it lost them."""
        async with self.engine.begin() as conn:
            await claims.ack(conn, claim)

    async def consume_groups(self, group_ids: list[str]) -> int:
        """Marks groups consumed by id (idempotent; see :func:`claims.consume`). Returns how many
        this call marked."""
        self._check_open()
        async with self.engine.begin() as conn:
            return await claims.consume(conn, group_ids)

    async def release_claims_of(self, claimer: str, run_id: str | None = None) -> int:
        """Gives back every unconsumed group ``claimer`` holds (see :func:`claims.release_claimer`)."""
        self._check_open()
        async with self.engine.begin() as conn:
            return await claims.release_claimer(conn, claimer, run_id)

    async def release(self, claim: Claim) -> None:
        """Gives a claim's groups back unconsumed. Raises ClaimExpiredError if it lost them."""
        async with self.engine.begin() as conn:
            await claims.release(conn, claim)

    # ---- queries and export -----------------------------------------------------------

    async def list_runs(self) -> list[RunSummary]:
        """Every run, newest first."""
        async with self.engine.connect() as conn:
            return await queries.list_runs(conn)

    async def run_summary(self, run_id: str) -> RunSummary:
        """One run with per-task tallies and its config. Raises RunNotFoundError."""
        async with self.engine.connect() as conn:
            return await queries.run_summary(conn, run_id)

    async def trajectories(self, run_id: str, **filters: Any) -> list[StoredTrajectory]:
        """Trajectories of a run (filters: limit, status, task, rollout_id)."""
        async with self.engine.connect() as conn:
            return await queries.trajectories(conn, run_id, **filters)

    async def export(
        self, run_id: str, path: Path, fmt: str = "jsonl", statuses: list[RolloutStatus] | None = None
    ) -> int:
        """Writes the run's trajectories to JSONL or parquet; returns how many."""
        await self.run_summary(run_id)
        return await export_run(self.engine, run_id, path, fmt, statuses=statuses)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed: open a new one with TrajectoryStore.open(url)")
