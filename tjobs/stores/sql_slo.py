"""The SQL store's service-level minutes (:meth:`TaskStore.add_slo_minutes`, :meth:`TaskStore.sum_slo_minutes`,
:meth:`TaskStore.purge_slo_minutes`) in ``slo_minutes`` and ``slo_hours`` of the first logical database.

A node adds its counts to its own rows (``INSERT ... ON DUPLICATE KEY UPDATE`` on MariaDB, ``ON
CONFLICT DO UPDATE`` on SQLite): one statement for every app and minute it has, then one for the same
counts summed per app and hour, in one transaction, so nodes never write the same row and an hour row is
always the sum of its minutes. A sum reads whole hours from ``slo_hours`` and the edges from
``slo_minutes`` (:mod:`tjobs.stores.slo_hours`), one statement: per table a primary-key range (one app)
or its period's index (every app).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import MetaData, Table, and_, delete, func, or_, select, union_all
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Select

from tjobs.model import SloCounts, SloMinute
from tjobs.stores.schema_slo import SLO_SUMMED_COLUMNS, slo_hours_table, slo_minutes_table
from tjobs.stores.slo_hours import MINUTES_PER_HOUR, hour_of, purge_cutoff_hour, split_by_hours
from tjobs.stores.sql_layout import keys_in

_SUMMED = SLO_SUMMED_COLUMNS
_METADATA = MetaData()
SLO_MINUTES = slo_minutes_table(_METADATA)  # unqualified: the apps database's options point it there
SLO_HOURS = slo_hours_table(_METADATA)


def _row(node_id: str, minute: SloMinute) -> dict[str, Any]:
    row: dict[str, Any] = {"app_id": minute.app_id, "minute": minute.minute, "node_id": node_id}
    row.update(zip(_SUMMED, minute.counts.values(), strict=True))
    return row


def _hour_rows(node_id: str, minutes: Sequence[SloMinute]) -> list[dict[str, Any]]:
    """The minutes' counts summed per app and hour."""
    sums: dict[tuple[str, int], list[int]] = {}
    for minute in minutes:
        key = (minute.app_id, hour_of(minute.minute))
        total = sums.get(key)
        if total is None:
            sums[key] = list(minute.counts.values())
        else:
            for index, value in enumerate(minute.counts.values()):
                total[index] += value
    rows: list[dict[str, Any]] = []
    for (app_id, hour), values in sums.items():
        row: dict[str, Any] = {"app_id": app_id, "hour": hour, "node_id": node_id}
        row.update(zip(_SUMMED, values, strict=True))
        rows.append(row)
    return rows


def _adding(conn: AsyncConnection, table: Table, period: str) -> Any:
    """``INSERT`` of rows that adds each count to the row already there."""
    if conn.dialect.name == "sqlite":
        lite = sqlite.insert(table)
        return lite.on_conflict_do_update(
            index_elements=["app_id", period, "node_id"],
            set_={name: table.c[name] + lite.excluded[name] for name in _SUMMED},
        )
    maria = mysql.insert(table)
    return maria.on_duplicate_key_update({name: table.c[name] + maria.inserted[name] for name in _SUMMED})


async def add_minutes(
    conn: AsyncConnection, options: dict[str, Any], node_id: str, minutes: Sequence[SloMinute]
) -> None:
    """Both statements in the caller's transaction."""
    rows = [_row(node_id, minute) for minute in minutes]
    await conn.execute(_adding(conn, SLO_MINUTES, "minute"), rows, execution_options=options)
    await conn.execute(_adding(conn, SLO_HOURS, "hour"), _hour_rows(node_id, minutes), execution_options=options)


def _sums(table: Table, app_id: str | None, *where: Any) -> Select[Any]:
    statement = select(*(func.coalesce(func.sum(table.c[name]), 0) for name in _SUMMED)).where(*where)
    return statement if app_id is None else statement.where(table.c.app_id == app_id)


def sum_statement(app_id: str | None, from_minute: int, to_minute: int) -> Any:
    """The one statement :func:`sum_minutes` sends: a row of sums per table it reads."""
    minutes, hours = SLO_MINUTES, SLO_HOURS
    split = split_by_hours(from_minute, to_minute)
    if split is None:
        return _sums(minutes, app_id, minutes.c.minute >= from_minute, minutes.c.minute < to_minute)
    parts = [_sums(hours, app_id, hours.c.hour >= split.from_hour, hours.c.hour < split.to_hour)]
    if split.edges:
        edges = [and_(minutes.c.minute >= start, minutes.c.minute < end) for start, end in split.edges]
        parts.append(_sums(minutes, app_id, or_(*edges)))
    return union_all(*parts)


async def sum_minutes(
    conn: AsyncConnection, options: dict[str, Any], app_id: str | None, from_minute: int, to_minute: int
) -> SloCounts:
    statement = sum_statement(app_id, from_minute, to_minute)
    totals = [0] * len(_SUMMED)
    for row in (await conn.execute(statement, execution_options=options)).all():
        for index, value in enumerate(row):
            totals[index] += int(value)
    return SloCounts.from_values(totals)


async def purge_minutes(conn: AsyncConnection, options: dict[str, Any], before_minute: int, limit: int) -> int:
    """Up to ``limit`` hour rows and ``limit`` minute rows of the hours wholly before ``before_minute``."""
    before_hour = purge_cutoff_hour(before_minute)
    gone = 0
    cutoffs = ((SLO_HOURS, "hour", before_hour), (SLO_MINUTES, "minute", before_hour * MINUTES_PER_HOUR))
    for table, period, before in cutoffs:
        key = (table.c.app_id, table.c[period], table.c.node_id)
        old = select(*key).where(table.c[period] < before).limit(limit)
        doomed = [tuple(row) for row in (await conn.execute(old, execution_options=options)).all()]
        if doomed:
            result = await conn.execute(delete(table).where(keys_in(key, doomed)), execution_options=options)
            gone += int(result.rowcount)
    return gone
