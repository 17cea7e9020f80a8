"""The SQL store's service-level minutes (:meth:`TaskStore.add_slo_minutes`, :meth:`TaskStore.sum_slo_minutes`,
:meth:`TaskStore.purge_slo_minutes`) in ``slo_minutes`` of the first logical database.

A node adds its counts to its own rows (``INSERT ... ON DUPLICATE KEY UPDATE`` on MariaDB, ``ON
CONFLICT DO UPDATE`` on SQLite: one statement for every app and minute it has), so nodes never write
the same row; a sum reads one primary-key range (an app's minutes) or the minute index (every app).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import MetaData, delete, func, select, tuple_
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from tjobs.model import SloCounts, SloMinute
from tjobs.stores.schema import SLO_COUNT_COLUMNS, SLO_LATENESS_COLUMNS, slo_minutes_table

_SUMMED = (*SLO_COUNT_COLUMNS, *SLO_LATENESS_COLUMNS)
SLO_MINUTES = slo_minutes_table(MetaData())  # unqualified: the apps database's options point it there


def _row(node_id: str, minute: SloMinute) -> dict[str, Any]:
    counts = minute.counts
    row: dict[str, Any] = {"app_id": minute.app_id, "minute": minute.minute, "node_id": node_id}
    row.update(
        zip(
            SLO_COUNT_COLUMNS,
            (counts.fires, counts.delivered, counts.dead, counts.misses, counts.throttled),
            strict=True,
        )
    )
    row.update(zip(SLO_LATENESS_COLUMNS, counts.lateness, strict=True))
    return row


async def add_minutes(
    conn: AsyncConnection, options: dict[str, Any], node_id: str, minutes: Sequence[SloMinute]
) -> None:
    table = SLO_MINUTES
    rows = [_row(node_id, minute) for minute in minutes]
    if conn.dialect.name == "sqlite":
        lite = sqlite.insert(table)
        statement: Any = lite.on_conflict_do_update(
            index_elements=["app_id", "minute", "node_id"],
            set_={name: table.c[name] + lite.excluded[name] for name in _SUMMED},
        )
    else:
        maria = mysql.insert(table)
        statement = maria.on_duplicate_key_update({name: table.c[name] + maria.inserted[name] for name in _SUMMED})
    await conn.execute(statement, rows, execution_options=options)


async def sum_minutes(
    conn: AsyncConnection, options: dict[str, Any], app_id: str | None, from_minute: int, to_minute: int
) -> SloCounts:
    table = SLO_MINUTES
    statement = select(*(func.coalesce(func.sum(table.c[name]), 0) for name in _SUMMED)).where(
        table.c.minute >= from_minute, table.c.minute < to_minute
    )
    if app_id is not None:
        statement = statement.where(table.c.app_id == app_id)
    values = [int(value) for value in (await conn.execute(statement, execution_options=options)).one()]
    fires, delivered, dead, misses, throttled = values[: len(SLO_COUNT_COLUMNS)]
    return SloCounts(fires, delivered, dead, misses, throttled, tuple(values[len(SLO_COUNT_COLUMNS) :]))


async def purge_minutes(conn: AsyncConnection, options: dict[str, Any], before_minute: int, limit: int) -> int:
    table = SLO_MINUTES
    old = select(table.c.app_id, table.c.minute, table.c.node_id).where(table.c.minute < before_minute).limit(limit)
    keys = (await conn.execute(old, execution_options=options)).all()
    if not keys:
        return 0
    doomed = [(row.app_id, row.minute, row.node_id) for row in keys]
    result = await conn.execute(
        delete(table).where(tuple_(table.c.app_id, table.c.minute, table.c.node_id).in_(doomed)),
        execution_options=options,
    )
    return int(result.rowcount)
