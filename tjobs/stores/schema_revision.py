"""A node runs only on a schema at least as new as its code: the first logical database's Alembic
revision (``alembic_version``) must be this version's newest, or one this version does not know (a newer
version's ``tjobs migrate`` ran first: migrations are additive, so the node keeps working). A schema
behind the code (say, without a table a later revision adds) is refused at start with
:class:`StorageNotMigrated`, rather than failing the first statement that needs the missing table.

The revisions are read from the migration files' ``revision`` / ``down_revision`` assignments, not
through Alembic: importing Alembic (every dialect's DDL module) is a sizeable part of a node's start-up,
and only ``tjobs migrate`` needs it. A unit test holds this reading equal to Alembic's.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import AsyncConnection

from tjobs.errors import TjobsError
from tjobs.stores.sql_layout import MYSQL, Layout

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
VERSION_TABLE = "alembic_version"


class StorageNotMigrated(TjobsError):
    """The databases lack the newest schema: ``tjobs migrate`` has not been run on them."""


@functools.cache
def known_revisions() -> tuple[str, frozenset[str]]:
    """This version's newest revision and every revision it ships."""
    parents = dict(_revision_of(path) for path in sorted((MIGRATIONS_DIR / "versions").glob("*.py")))
    heads = sorted(set(parents) - {parent for each in parents.values() for parent in each})
    if len(heads) != 1:
        raise RuntimeError(f"the migrations in {MIGRATIONS_DIR} have {len(heads)} heads: {heads}")
    return heads[0], frozenset(parents)


def module_literals(path: Path, names: tuple[str, ...]) -> dict[str, Any]:
    """The top-level literal assignments of ``names`` in a migration file (those it makes)."""
    values: dict[str, Any] = {}
    for statement in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in names:
            values[target.id] = ast.literal_eval(value)
    return values


def _revision_of(path: Path) -> tuple[str, tuple[str, ...]]:
    """A migration file's ``revision`` and the revisions it follows (``down_revision``: none, one, or
    several for a merge), from the file's top-level literal assignments."""
    values = module_literals(path, ("revision", "down_revision"))
    down = values.get("down_revision")
    return str(values["revision"]), (down,) if isinstance(down, str) else tuple(down or ())


async def check_schema_revision(conn: AsyncConnection, layout: Layout, where: str) -> None:
    """Raise :class:`StorageNotMigrated` unless the first logical database's schema is at this
    version's newest revision or a newer one."""
    head, known = known_revisions()
    found = await recorded_revisions(conn, layout)
    if head in found or any(revision not in known for revision in found):
        return
    at = f"revision {', '.join(found)}" if found else "no schema revision"
    raise StorageNotMigrated(f"{where} is at {at}, this version needs {head}: run `tjobs migrate` first")


async def recorded_revisions(conn: AsyncConnection, layout: Layout) -> list[str]:
    """The first logical database's Alembic revisions (none before its first migration)."""
    schema = layout.apps_database.schema

    def has_table(sync_conn: object) -> bool:
        return bool(inspect(sync_conn).has_table(VERSION_TABLE, schema=schema))

    if not await conn.run_sync(has_table):
        return []
    table = f"`{schema}`.{VERSION_TABLE}" if layout.dialect == MYSQL and schema else VERSION_TABLE
    return [str(value) for value in (await conn.execute(text(f"SELECT version_num FROM {table}"))).scalars()]
