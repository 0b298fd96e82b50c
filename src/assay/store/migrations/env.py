"""Alembic environment for the assay store.

The store runs migrations programmatically (see ``assay.store.opening.Opening.migrate``) and hands over
its open connection through ``config.attributes["connection"]``; when that is absent (e.g. a
hand-made alembic config) a URL from ``sqlalchemy.url`` is used instead.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from assay.store.models import metadata

config = context.config
target_metadata = metadata


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
