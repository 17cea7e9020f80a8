"""A node runs only on a schema at least as new as its code: the first logical database's Alembic
revision (``alembic_version``) must be this version's newest, or one this version does not know (a newer
version's ``tjobs migrate`` ran first: migrations are additive, so the node keeps working). A schema
behind the code (say, without a table a later revision adds) is refused at start with
:class:`StorageNotMigrated`, rather than failing the first statement that needs the missing table.
"""

from __future__ import annotations

import functools
from pathlib import Path

from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import AsyncConnection

from tjobs.stores.layout_record import StorageNotMigrated
from tjobs.stores.sql_layout import MYSQL, Layout

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
VERSION_TABLE = "alembic_version"


@functools.cache
def known_revisions() -> tuple[str, frozenset[str]]:
    """This version's newest revision and every revision it ships."""
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    head = script.get_current_head()
    assert head is not None
    return head, frozenset(revision.revision for revision in script.walk_revisions())


async def check_schema_revision(conn: AsyncConnection, layout: Layout, where: str) -> None:
    """Raise :class:`StorageNotMigrated` unless the first logical database's schema is at this
    version's newest revision or a newer one."""
    schema = layout.apps_database.schema

    def has_table(sync_conn: object) -> bool:
        return bool(inspect(sync_conn).has_table(VERSION_TABLE, schema=schema))

    head, known = known_revisions()
    found: list[str] = []
    if await conn.run_sync(has_table):
        table = f"`{schema}`.{VERSION_TABLE}" if layout.dialect == MYSQL and schema else VERSION_TABLE
        found = [str(value) for value in (await conn.execute(text(f"SELECT version_num FROM {table}"))).scalars()]
    if head in found or any(revision not in known for revision in found):
        return
    at = f"revision {', '.join(found)}" if found else "no schema revision"
    raise StorageNotMigrated(f"{where} is at {at}, this version needs {head}: run `tjobs migrate` first")
