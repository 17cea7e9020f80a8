"""What the revisions that add tables share: create each table (and its indexes) unless it is there.

A revision may run over tables already present: revisions 0008 and 0013 create their tables from the
current schema, and a database whose ``alembic_version`` was set back runs the later revisions again
(tests/integration/test_store_sql.py, an earlier deployment). Those tables are left as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alembic.operations import Operations
from sqlalchemy import Connection, inspect
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
