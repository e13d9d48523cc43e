"""Alembic environment of the trajectory store.

:func:`gymfleet.orchestrator.store.migrate.upgrade` runs it programmatically on the store's own
connection (``config.attributes["connection"]``); the ``alembic`` command line works too, with
``-x url=...`` (``alembic -c orchestrator/store/alembic.ini -x url=sqlite:///runs/x.db upgrade head``).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from gymfleet.orchestrator.store.schema import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("pass the store URL: alembic -x url=sqlite:///runs/run.db upgrade head")
    url = url.replace("+aiosqlite", "").replace("+asyncpg", "+psycopg")
    with create_engine(url).connect() as conn:
        _run(conn)


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
run_migrations_online()
