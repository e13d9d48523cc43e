"""Runs the store's Alembic migrations programmatically on an open async engine."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    """The Alembic config of the store, with ``connection`` shared when given."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


MIGRATION_LOCK = 0x67796D666C656574
"""PostgreSQL advisory lock key held while migrating ("gymfleet" in ASCII)."""


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Brings the schema to ``revision`` (idempotent; creates every table on an empty database).

    On PostgreSQL, several processes opening one store at once (orchestrators sharing a run)
    migrate one after the other under an advisory lock: the first creates the tables, the others
    find them at head (concurrent ``CREATE TABLE`` would fail on PostgreSQL's catalog).
    """
    async with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        await conn.run_sync(lambda sync_conn: command.upgrade(alembic_config(sync_conn), revision))
