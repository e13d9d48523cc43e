"""Creates the store's async SQLAlchemy engine: SQLite (aiosqlite, WAL) or PostgreSQL (asyncpg)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gymfleet.orchestrator.store.errors import StoreURLError

SQLITE_BUSY_TIMEOUT_MS = 60_000
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def normalise_url(url: str) -> str:
    """The async driver URL for ``url``.

    A bare path (``runs/x.db``) or ``sqlite:///`` becomes ``sqlite+aiosqlite:///``;
    ``postgresql://`` / ``postgres://`` become ``postgresql+asyncpg://``.

    Raises:
        StoreURLError: another database or driver.
    """
    if "://" not in url:
        return f"sqlite+aiosqlite:///{url}"
    scheme, rest = url.split("://", 1)
    mapped = {
        "sqlite": "sqlite+aiosqlite",
        "sqlite+aiosqlite": "sqlite+aiosqlite",
        "postgresql": "postgresql+asyncpg",
        "postgres": "postgresql+asyncpg",
        "postgresql+asyncpg": "postgresql+asyncpg",
    }.get(scheme)
    if mapped is None:
        raise StoreURLError(
            f"store URL {url!r}: use sqlite:///PATH (embedded) or postgresql://USER:PASS@HOST/DB"
        )
    return f"{mapped}://{rest}"


def create_store_engine(url: str, *, schema: str | None = None, pool_size: int = 5) -> AsyncEngine:
    """An async engine for ``url`` with the store's connection settings.

    SQLite: WAL journal, ``synchronous=NORMAL``, foreign keys on, a busy timeout, and every
    transaction opened with ``BEGIN IMMEDIATE`` (so that read-then-write transactions such as
    claims never deadlock on a lock upgrade, and SAVEPOINTs work: the driver's own transaction
    handling is switched off, as SQLAlchemy's aiosqlite docs advise).

    Args:
        url: store URL (see :func:`normalise_url`).
        schema: PostgreSQL only: the schema to create and use (``search_path``); lets tests and
            several runs share one database.
        pool_size: PostgreSQL connection pool size.

    Raises:
        StoreURLError: unsupported URL or bad schema name.
    """
    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if schema is not None:
            raise StoreURLError("schema= is for PostgreSQL; give SQLite its own file instead")
        return _sqlite_engine(url, parsed.database)
    kwargs: dict[str, Any] = {"pool_size": pool_size, "max_overflow": pool_size, "pool_pre_ping": True}
    if schema is not None:
        if not _SCHEMA_NAME.match(schema):
            raise StoreURLError(f"schema {schema!r}: use letters, digits and _ only")
        kwargs["connect_args"] = {"server_settings": {"search_path": schema}}
    return create_async_engine(url, hide_parameters=True, **kwargs)


def summarise_db_error(exc: BaseException, limit: int = 300) -> str:
    """One line for people: the driver's error without SQLAlchemy's SQL statement and parameters
    (which would dump every binary array of a trajectory)."""
    orig = getattr(exc, "orig", None) if isinstance(exc, StatementError) else None
    cause = orig if orig is not None else exc
    lines = str(cause).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > limit:
        text = text[:limit] + "…"
    return f"{type(cause).__name__}: {text}"


def _sqlite_engine(url: str, database: str | None) -> AsyncEngine:
    if database and database != ":memory:":
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, hide_parameters=True, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in (
            "journal_mode=WAL",
            "synchronous=NORMAL",
            "foreign_keys=ON",
            f"busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
        ):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


async def ensure_schema(engine: AsyncEngine, schema: str | None) -> None:
    """Creates the PostgreSQL ``schema`` when missing (no-op for SQLite or ``None``)."""
    if schema is None or engine.dialect.name != "postgresql":
        return
    async with engine.begin() as conn:
        await conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
