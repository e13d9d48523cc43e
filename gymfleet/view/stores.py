"""The stores the viewer reads, opened read-only: one URL, or every ``RUN_ID/store.db`` of a runs folder.

A viewer must never write to a store a run is writing: SQLite files are opened with
``mode=ro`` and ``PRAGMA query_only`` (and without the store's ``BEGIN IMMEDIATE``, which would take
the write lock on every read), PostgreSQL sessions with ``default_transaction_read_only``. No
migration runs: a store older than the viewer's indexes is read as it is (slower, never altered).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import event, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gymfleet.core.errors import StoreError
from gymfleet.orchestrator import display_url, normalise_url, summarise_db_error, RunRow
from gymfleet.view.errors import NoStoreError, NotFoundError

READ_TIMEOUT_S = 5.0
"""SQLite: seconds a read waits on a lock (a writer checkpointing) before it fails."""


def open_readonly(url: str, *, schema: str | None = None) -> AsyncEngine:
    """A read-only async engine over the store at ``url`` (a path, ``sqlite:///`` or ``postgresql://``).

    Args:
        schema: PostgreSQL only: the schema the store lives in (``search_path``); None: the default.

    Raises:
        NoStoreError: an unsupported URL, or a SQLite file that does not exist (reading must not
            create an empty store).
    """
    try:
        parsed = make_url(normalise_url(url))
    except StoreError as exc:
        raise NoStoreError(str(exc)) from exc
    if parsed.get_backend_name() != "sqlite":
        settings = {"default_transaction_read_only": "on"} | ({"search_path": schema} if schema else {})
        return create_async_engine(parsed, hide_parameters=True, pool_size=4, max_overflow=4, pool_pre_ping=True,
                                   connect_args={"server_settings": settings})
    path = Path(parsed.database or "").expanduser()
    if not path.is_file():
        raise NoStoreError(f"no store at {path}; pass --store URL (the `store:` of the run config) "
                           "or --runs-dir DIR (the folder holding RUN_ID/store.db)")
    engine = create_async_engine(f"sqlite+aiosqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true",
                                 hide_parameters=True, connect_args={"timeout": READ_TIMEOUT_S})

    @event.listens_for(engine.sync_engine, "connect")
    def _query_only(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA query_only=ON")
        cursor.close()

    return engine


@dataclass
class StoreSet:
    """Every store the viewer reads, and which run lives in which.

    Args:
        store: one store URL; None: every ``<runs_dir>/*/store.db`` (found again at each listing, so
            a run started after the viewer shows up).
        runs_dir: the folder holding the runs (their store, ``report/`` and artifacts).
    """

    store: str | None
    runs_dir: Path
    _engines: dict[str, AsyncEngine] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def urls(self) -> list[str]:
        """The store URLs to read now."""
        if self.store is not None:
            return [self.store]
        return sorted(str(p) for p in self.runs_dir.glob("*/store.db"))

    def check(self) -> None:
        """Fails early, before the server starts, on a store that cannot be found.

        Raises:
            NoStoreError: ``--store`` names a missing file or a bad URL, or the runs folder does
                not exist.
        """
        if self.store is not None:
            open_readonly(self.store)  # raises on a missing file or bad URL; nothing is connected yet
        elif not self.runs_dir.is_dir():
            raise NoStoreError(f"no runs folder at {self.runs_dir}; pass --runs-dir DIR (the folder holding "
                               "RUN_ID/store.db) or --store URL")

    async def engine(self, url: str) -> AsyncEngine:
        """The read-only engine of ``url`` (opened once)."""
        async with self._lock:
            if url not in self._engines:
                self._engines[url] = open_readonly(url)
            return self._engines[url]

    async def run_ids(self, url: str) -> list[str]:
        """The runs stored at ``url`` ([] for a file that is not a store yet)."""
        engine = await self.engine(url)
        try:
            async with engine.connect() as conn:
                return list((await conn.scalars(select(RunRow.__table__.c.run_id))).all())
        except DBAPIError:  # a store.db another process is creating: no tables yet
            return []

    async def engine_of(self, run_id: str) -> tuple[str, AsyncEngine]:
        """The URL and engine of the store holding ``run_id``.

        Raises:
            NotFoundError: no store here holds the run.
        """
        own = self.runs_dir / run_id / "store.db"
        candidates = self.urls() if self.store is not None or not own.is_file() else [str(own)]
        for url in candidates:
            if run_id in await self.run_ids(url):
                return url, await self.engine(url)
        raise NotFoundError(f"no run {run_id!r} in {', '.join(display_url(u) for u in candidates) or self.runs_dir}")

    async def close(self) -> None:
        """Disposes of every engine."""
        engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            await engine.dispose()


def describe_db_error(exc: BaseException) -> str:
    """One line for a database error (no SQL, no parameters)."""
    return summarise_db_error(exc)
