"""The store's batched writer: one background task drains a queue of write operations.

Operations run in the order they were queued. Each batch is one database transaction. A batch
first runs inside one SAVEPOINT; if any operation fails, that savepoint is rolled back and the
batch replayed with one SAVEPOINT per operation: a rollout lands whole or not at all, and one
failing rollout never takes the others of its batch down with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gymfleet.orchestrator.store.bulk import BulkItem, apply_batch
from gymfleet.orchestrator.store.engine import summarise_db_error
from gymfleet.orchestrator.store.errors import StoreClosedError, StoreWriteError

log = logging.getLogger(__name__)

Apply = Callable[[AsyncConnection], Awaitable[Any]]


@dataclass
class WriteOp:
    """One unit that lands whole: ``apply`` runs inside its own savepoint."""

    label: str
    """What it writes, for error messages (e.g. ``trajectory run/x/0``)."""
    apply: Apply
    bulk: BulkItem | None = None
    """The same write as data, for :func:`bulk.apply_batch` (None: only ``apply`` can do it)."""
    done: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class BatchWriter:
    """Drains queued :class:`WriteOp` s in batches of at most ``max_batch``.

    Args:
        engine: the store engine.
        max_batch: most operations per transaction.
        linger_s: seconds to wait after the first queued operation for more to batch with it.
    """

    def __init__(self, engine: AsyncEngine, *, max_batch: int = 256, linger_s: float = 0.02) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self.linger_s = linger_s
        self.queue: asyncio.Queue[WriteOp | None] = asyncio.Queue()
        self.n_written = 0
        self.n_failed = 0
        self.fatal: StoreWriteError | None = None
        """Set at the first write that failed because the database cannot take any more (disk
        full, read-only, no permission): every later write would fail the same way."""
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> None:
        """Starts the background task (called by ``TrajectoryStore.open``)."""
        self._task = asyncio.create_task(self._run(), name="store-writer")

    def submit(self, label: str, apply: Apply, bulk: BulkItem | None = None) -> asyncio.Future[Any]:
        """Queues one operation; the returned future resolves once it committed.

        Raises:
            StoreClosedError: the writer was closed.
        """
        if self._closed:
            raise StoreClosedError(f"cannot write {label}: the store is closed; open a new one with TrajectoryStore.open(url)")
        op = WriteOp(label, apply, bulk)
        op.done.add_done_callback(_consume_exception)
        self.queue.put_nowait(op)
        return op.done

    async def flush(self) -> None:
        """Waits until everything queued so far has committed (or failed)."""
        await self.queue.join()

    async def close(self) -> None:
        """Writes what is queued, then stops the background task."""
        if self._closed:
            return
        self._closed = True
        self.queue.put_nowait(None)
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while True:
            batch = [await self.queue.get()]
            if batch[0] is not None and self.linger_s > 0:
                # Gather what arrives meanwhile: each database round trip goes through the
                # driver's thread, so fewer, larger transactions keep the event loop responsive.
                await asyncio.sleep(self.linger_s)
            while len(batch) < self.max_batch and not self.queue.empty():
                batch.append(self.queue.get_nowait())
            ops = [op for op in batch if op is not None]
            try:
                if ops:
                    await self._write(ops)
            finally:
                for _ in batch:
                    self.queue.task_done()
            if len(ops) < len(batch):
                return

    async def _write(self, ops: list[WriteOp]) -> None:
        if self.fatal is not None:  # the database takes no more: fail at once, said once already
            for op in ops:
                self._settle(op, False, self.fatal)
            return
        try:
            results = await self._transaction(ops)
        except Exception as exc:  # the commit itself failed: retry each op in its own transaction
            if store_is_full(exc):
                for op in ops:
                    self._settle(op, False, exc)
                return
            log.warning("store batch of %d failed to commit (%s); writing one by one", len(ops), summarise_db_error(exc))
            for op in ops:
                await self._write_one(op)
            return
        for op, (ok, value) in zip(ops, results, strict=True):
            self._settle(op, ok, value)

    async def _write_one(self, op: WriteOp) -> None:
        try:
            ((ok, value),) = await self._transaction([op])
        except Exception as exc:
            ok, value = False, exc
        self._settle(op, ok, value)

    async def _transaction(self, ops: list[WriteOp]) -> list[tuple[bool, Any]]:
        results: list[tuple[bool, Any]] = []
        async with self.engine.begin() as conn:
            if len(ops) > 1:
                # Optimistic: the whole batch in one savepoint, with one statement per kind when
                # every op has a bulk form. If anything fails, that savepoint is rolled back and
                # the batch replayed one savepoint per operation, so only the failing one is lost.
                items = [op.bulk for op in ops]
                try:
                    async with conn.begin_nested():
                        if all(item is not None for item in items):
                            return [(True, r) for r in await apply_batch(conn, items)]  # type: ignore[arg-type]
                        return [(True, await op.apply(conn)) for op in ops]
                except Exception:
                    log.info("store batch of %d had a failing write; isolating it", len(ops))
            for op in ops:
                try:
                    async with conn.begin_nested():
                        results.append((True, await op.apply(conn)))
                except Exception as exc:
                    results.append((False, exc))
        return results

    def _settle(self, op: WriteOp, ok: bool, value: Any) -> None:
        if op.done.done():
            return
        if ok:
            self.n_written += 1
            op.done.set_result(value)
            return
        self.n_failed += 1
        error = StoreWriteError(f"{op.label}: {summarise_db_error(value)}")
        error.__cause__ = value
        if self.fatal is None and store_is_full(value):
            self.fatal = store_full_error(value)
            log.info("%s", self.fatal)  # raised to the caller (the scheduler stops the run)
        elif self.fatal is None:  # after a fatal one, every write fails the same way: said once
            log.error("store write failed: %s", error)
        op.done.set_exception(error)


_FULL = ("database or disk is full", "no space left", "disk full", "diskfull", "read-only", "readonly",
         "attempt to write a readonly database", "permission denied", "could not extend file", "quota")


def store_is_full(exc: BaseException) -> bool:
    """True when ``exc`` says the database cannot take any more writes (SQLite's "database or
    disk is full", PostgreSQL's DiskFull, a read-only file), not that one write was bad."""
    text = f"{type(exc).__name__} {exc}".lower()
    return any(word in text for word in _FULL)


def store_full_error(exc: BaseException) -> StoreWriteError:
    """The error that stops a run whose store cannot take any more writes (``exc`` said so)."""
    error = StoreWriteError(
        f"the store cannot write any more ({summarise_db_error(exc)}): free space on its disk (or make "
        "it writable), then run the same command again: what it wrote is kept and the run resumes")
    error.__cause__ = exc
    return error


def _consume_exception(future: asyncio.Future[Any]) -> None:
    # Callers may fire and forget; the failure is logged and counted, so mark it retrieved.
    if not future.cancelled():
        future.exception()
