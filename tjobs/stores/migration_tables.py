"""What the revisions that add tables or columns share: create each table (and its indexes) unless it is
there; add columns to every shard table of a kind, and drop them again.

A revision may run over tables already present: revisions 0008 and 0013 create their tables from the
current schema, and a database whose ``alembic_version`` was set back runs the later revisions again
(tests/integration/test_store_sql.py, an earlier deployment). Those tables are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from alembic.operations import Operations
from sqlalchemy import Column, Connection, inspect
from sqlalchemy.exc import NoSuchTableError
from sqlalchemy.schema import SchemaItem

from tjobs.stores.schema import MYSQL_TABLE_OPTIONS

Index = tuple[str, Sequence[str]]  # name, columns


def create_missing_tables(
    op: Operations | Any, tables: Sequence[tuple[str, Sequence[SchemaItem], Sequence[Index]]]
) -> None:
    """Create each ``(name, schema items, indexes)`` that the database does not have yet (``op``: the
    revision's :class:`Operations`, or alembic's ``op`` module)."""
    options: dict[str, Any] = dict(MYSQL_TABLE_OPTIONS)
    for name, items, indexes in tables:
        if table_exists(op.get_bind(), name):
            continue
        op.create_table(name, *items, **options)
        for index_name, columns in indexes:
            op.create_index(index_name, name, list(columns))


def table_exists(bind: Connection, table: str) -> bool:
    """Whether ``table`` is there (read as revision 0014 reads columns: the inspector's table listing wants
    a default schema name, which a MariaDB connection switched with ``USE`` does not give it)."""
    try:
        inspect(bind).get_columns(table)
    except NoSuchTableError:
        return False
    return True


def add_columns(
    op: Operations | Any, kind: str, tables_per_database: int, columns: Sequence[Column[Any]], *, if_missing: bool
) -> None:
    """Add ``columns`` to each shard table of ``kind`` (``flows`` -> ``flows_00``, ``flows_01``, ...); with
    ``if_missing``, only those a table does not have yet (a revision that may run again over its own work)."""
    for index in range(tables_per_database):
        table = f"{kind}_{index:02d}"
        present = {column["name"] for column in inspect(op.get_bind()).get_columns(table)} if if_missing else set()
        for column in columns:
            if column.name not in present:
                op.add_column(table, column)


def drop_columns(op: Operations | Any, kind: str, tables_per_database: int, names: Sequence[str]) -> None:
    """Drop the columns ``names`` from each shard table of ``kind`` (a revision's downgrade of
    :func:`add_columns`)."""
    for index in range(tables_per_database):
        with op.batch_alter_table(f"{kind}_{index:02d}") as batch:
            for name in names:
                batch.drop_column(name)


def add_indexes(
    op: Operations | Any, kind: str, tables_per_database: int, indexes: Callable[[str], Sequence[Index]]
) -> None:
    """Add the indexes ``indexes(table)`` names to each shard table of ``kind`` that lacks them. On MariaDB
    each is built while the table takes writes (``ALGORITHM=INPLACE, LOCK=NONE``: it reads the rows there,
    logs the writes made meanwhile and applies them at the end, under a moment's metadata lock); MariaDB
    refuses the statement rather than block writes. A revision that runs again over its own work adds
    nothing."""
    bind = op.get_bind()
    mysql = bind.dialect.name != "sqlite"
    for index in range(tables_per_database):
        table = f"{kind}_{index:02d}"
        present = {found["name"] for found in inspect(bind).get_indexes(table)}
        for name, columns in indexes(table):
            if name in present:
                continue
            if mysql:
                listed = ", ".join(f"`{column}`" for column in columns)
                op.execute(f"ALTER TABLE `{table}` ADD INDEX `{name}` ({listed}), ALGORITHM=INPLACE, LOCK=NONE")
            else:
                op.create_index(name, table, list(columns))


def drop_indexes(
    op: Operations | Any, kind: str, tables_per_database: int, indexes: Callable[[str], Sequence[Index]]
) -> None:
    """Drop what :func:`add_indexes` added (a revision's downgrade)."""
    for index in range(tables_per_database):
        table = f"{kind}_{index:02d}"
        for name, _columns in indexes(table):
            op.drop_index(name, table)
