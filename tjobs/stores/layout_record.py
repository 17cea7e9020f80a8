"""The layout record: the data remembers the layout it was written for, and refuses any other.

A task's shard is in its id, and the shard's database and table follow from ``storage.topology`` and
``storage.database_prefix``; the server of each logical database is the shard map's
(:mod:`sharding.shard_map`), which ``storage.urls`` only seeds. Started with other values on
existing data, a node would look for tasks where they are not: they would answer 404 and never fire.
So ``tjobs migrate`` records these facts in ``tjobs_layout`` (in the first logical database), a node's
first start records them if ``migrate`` did not, and every later ``migrate`` or start compares and
refuses a difference with :class:`StorageLayoutMismatch`. Changing the layout means moving the data:
an explicit operation of its own, never a restart with other settings.

The configured server list is checked against the shard map (:func:`check_shard_map`): a list that
names another server, lacks one or reorders them is refused the same way (:class:`ShardMapMismatch`).
"""

from __future__ import annotations

from sqlalchemy import MetaData, insert, inspect, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tjobs.settings import StorageSettings
from tjobs.stores.contracts.shard_admin import ShardMapMismatch, StorageLayoutMismatch, check_shard_map
from tjobs.stores.schema import LAYOUT_TABLE, layout_table
from tjobs.stores.schema_revision import StorageNotMigrated, check_schema_revision
from tjobs.stores.sql_layout import Layout

__all__ = [  # the mismatches and check_shard_map are the shard-administration contract's, exported here too
    "ShardMapMismatch",
    "StorageLayoutMismatch",
    "StorageNotMigrated",  # defined beside the schema revision it is about; imported from here too
    "check_facts",
    "check_shard_map",
    "ensure_layout",
    "layout_facts",
    "recorded_layout",
]

_LAYOUT = layout_table(MetaData())


def layout_facts(settings: StorageSettings) -> dict[str, str]:
    """The settings that decide where a task lives, as recorded."""
    return {"topology": str(settings.parsed_topology()), "database_prefix": settings.database_prefix}
    # Data recorded before the shard map also has "servers" (the count of storage.urls): no longer
    # compared; the shard map says where each database is.


async def recorded_layout(conn: AsyncConnection, layout: Layout) -> dict[str, str] | None:
    """The recorded facts, or ``None`` where the layout table does not exist (not migrated)."""
    schema = layout.apps_database.schema

    def has_table(sync_conn: object) -> bool:
        return bool(inspect(sync_conn).has_table(LAYOUT_TABLE, schema=schema))

    if not await conn.run_sync(has_table):
        return None
    rows = await conn.execute(select(_LAYOUT.c.name, _LAYOUT.c.value), execution_options=layout.apps_options)
    return {str(name): str(value) for name, value in rows}


def check_facts(recorded: dict[str, str], expected: dict[str, str], where: str) -> None:
    """Raise :class:`StorageLayoutMismatch` naming each fact that differs."""
    differences = [
        f"storage.{name} is {expected[name]!r} but the data was written with {recorded[name]!r}"
        for name in expected
        if name in recorded and recorded[name] != expected[name]
    ]
    if differences:
        raise StorageLayoutMismatch(
            f"refusing to use {where}: "
            + "; ".join(differences)
            + ". Tasks would be looked up in the wrong shards. Start with the recorded settings; "
            "changing the layout requires moving the data, not a restart."
        )


async def ensure_layout(engine: AsyncEngine, layout: Layout, settings: StorageSettings, where: str) -> None:
    """Compare the configured layout with the recorded one and record what is missing.

    Raises :class:`StorageLayoutMismatch` on a difference, :class:`StorageNotMigrated` if the layout
    table does not exist or the schema is behind this version's (:mod:`tjobs.stores.schema_revision`).
    """
    expected = layout_facts(settings)
    for _ in range(2):  # a concurrent first start may record the same facts: read them back once
        async with engine.begin() as conn:
            recorded = await recorded_layout(conn, layout)
            if recorded is None:
                raise StorageNotMigrated(f"{where} has no layout record; run `tjobs migrate` first")
            check_facts(recorded, expected, where)
            await check_schema_revision(conn, layout, where)
            missing = [{"name": n, "value": v} for n, v in expected.items() if n not in recorded]
            if not missing:
                return
            try:
                await conn.execute(insert(_LAYOUT), missing, execution_options=layout.apps_options)
                return
            except sa_exc.IntegrityError:
                continue
    raise StorageLayoutMismatch(f"{where}: the layout record is being written concurrently; retry")
