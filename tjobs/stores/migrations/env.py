"""Alembic environment for one logical database of tjobs.

:func:`tjobs.stores.migrate.migrate` runs Alembic once per logical database, on a connection already pointed
at it (``USE <db>`` on MariaDB, the database's own file on SQLite), so each database has its own
``alembic_version`` table. The shape of the database (how many shard tables, whether it holds the
``apps`` table) is handed to every revision's ``upgrade(**kw)``.
"""

from __future__ import annotations

from alembic import context

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `tjobs migrate`; offline mode is not supported")

context.configure(connection=connection, target_metadata=None, transaction_per_migration=False)
with context.begin_transaction():
    context.run_migrations(
        tables_per_database=config.attributes["tables_per_database"],
        holds_apps=config.attributes["holds_apps"],
    )
