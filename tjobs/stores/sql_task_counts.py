"""Task counts by deltas (``task_counts`` in every logical database, which
:meth:`tjobs.stores.contracts.TaskRecords.read_task_counts` reads): the statement every task write adds to
its own transaction, and the statements of the reconciliation of one shard table.

**The delta.** A write sums its tasks' changes per (counts table, app, status, table index)
(:class:`CountDeltas`) and sends them as ONE upsert per logical database it wrote to, after its task
statements: MariaDB ``INSERT … ON DUPLICATE KEY UPDATE n = n + VALUES(n)``, SQLite ``INSERT … ON
CONFLICT DO UPDATE SET n = n + excluded.n``; rows in key order, so two writers lock shared rows in one
order. A write that changes no count (a fire that only moves ``next_run_at``) sends nothing.

**The reconciliation** of one shard table reads its count rows and counts its tasks in ONE snapshot
(MariaDB: ``REPEATABLE READ``, the view taken by the first read; SQLite: the write transaction), and
adds the difference to the rows as they are now (``n = n + correction``). A writer commits its task
rows and its delta together, so what the rows are off by is the same in the snapshot and now: the
correction is exact however many writers committed meanwhile, and no writer waits for the count. Two
reconciliations of one table cannot both apply theirs: each bumps the table's marker row (app ``''``,
status :data:`RECONCILED`) from the value its snapshot read, and the second finds it moved and applies
nothing. Rows left at 0 are deleted (a writer's later delta inserts its row again).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from tjobs.model import TaskStatus
from tjobs.stores.contracts.tasks import CountCorrection
from tjobs.stores.sql_layout import MYSQL, ShardTables

RECONCILED = "reconciled"
"""The status of a table's marker row (app ``''``): how many reconciliations the table has had."""
MARKER_APP = ""

_COLUMNS = "(app_id, status, table_index, n)"


class CountDeltas:
    """The net change one transaction makes to the task counts, per counts table and key."""

    def __init__(self) -> None:
        self._by_key: Counter[tuple[str, str, str, int]] = Counter()

    def change(self, home: ShardTables, app_id: str, before: TaskStatus | None, after: TaskStatus | None) -> None:
        """One task of ``home`` went from ``before`` to ``after`` (``None``: absent)."""
        if before is after:
            return
        if before is not None:
            self._by_key[(home.task_counts_sql, app_id, before.value, home.table_index)] -= 1
        if after is not None:
            self._by_key[(home.task_counts_sql, app_id, after.value, home.table_index)] += 1

    def statements(self, dialect: str) -> list[tuple[str, list[Any]]]:
        """One upsert per counts table with a non-zero change, its rows in key order."""
        by_table: dict[str, list[Any]] = {}
        for (table, app_id, status, table_index), n in sorted(self._by_key.items()):
            if n:
                by_table.setdefault(table, []).extend((app_id, status, table_index, n))
        return [(upsert_sql(dialect, table, len(params) // 4), params) for table, params in by_table.items()]


def upsert_sql(dialect: str, table: str, rows: int) -> str:
    """Add ``rows`` (app_id, status, table_index, n) deltas to ``table``'s counts."""
    if dialect == MYSQL:
        values = ", ".join(["(%s, %s, %s, %s)"] * rows)
        return f"INSERT INTO {table} {_COLUMNS} VALUES {values} ON DUPLICATE KEY UPDATE n = n + VALUES(n)"
    values = ", ".join(["(?, ?, ?, ?)"] * rows)
    return (
        f"INSERT INTO {table} {_COLUMNS} VALUES {values} "
        "ON CONFLICT (app_id, status, table_index) DO UPDATE SET n = n + excluded.n"
    )


async def apply_deltas(conn: AsyncConnection, dialect: str, deltas: CountDeltas) -> None:
    """Send ``deltas`` in ``conn``'s transaction (after the task statements they describe)."""
    for sql, params in deltas.statements(dialect):
        await conn.exec_driver_sql(sql, tuple(params))


@dataclass(frozen=True, slots=True)
class TableCounts:
    """One shard table as one snapshot saw it: its count rows, its tasks, and its marker."""

    rows: dict[tuple[str, str], int]
    tasks: dict[tuple[str, str], int]
    marker: int | None


async def read_table_counts(conn: AsyncConnection, home: ShardTables) -> TableCounts:
    """The count rows of ``home``'s table (the first read: on MariaDB it takes the snapshot), then a
    count of its tasks, in ``conn``'s transaction."""
    c = home.task_counts.c
    rows: dict[tuple[str, str], int] = {}
    marker: int | None = None
    read = select(c.app_id, c.status, c.n).where(c.table_index == home.table_index)
    for app_id, status, n in await conn.execute(read, execution_options=home.options):
        if app_id == MARKER_APP:
            marker = int(n)
        else:
            rows[(str(app_id), str(status))] = int(n)
    t = home.tasks.c
    counted = select(t.app_id, t.status, func.count()).group_by(t.app_id, t.status)
    tasks = {
        (str(app_id), str(status)): int(n)
        for app_id, status, n in await conn.execute(counted, execution_options=home.options)
    }
    return TableCounts(rows, tasks, marker)


def corrections(seen: TableCounts) -> list[CountCorrection]:
    """What each (app, status) row is off by in the snapshot, as the amounts to add to it."""
    keys = sorted({*seen.rows, *seen.tasks})
    found = [(key, seen.tasks.get(key, 0) - seen.rows.get(key, 0)) for key in keys]
    return [CountCorrection(app_id, status, by) for (app_id, status), by in found if by]


def marker_claim(dialect: str, home: ShardTables, seen: int | None) -> Any:
    """Bump the table's marker from the value the snapshot read, or insert it at 1 if the snapshot had
    none: 0 rows when another reconciliation moved it first."""
    c = home.task_counts.c
    if seen is not None:
        return (
            update(home.task_counts)
            .where(c.app_id == MARKER_APP, c.status == RECONCILED, c.table_index == home.table_index, c.n == seen)
            .values(n=seen + 1)
        )
    values = {"app_id": MARKER_APP, "status": RECONCILED, "table_index": home.table_index, "n": 1}
    if dialect == MYSQL:
        return insert(home.task_counts).prefix_with("IGNORE").values(values)
    return sqlite_insert(home.task_counts).values(values).on_conflict_do_nothing()


async def apply_corrections(
    conn: AsyncConnection, dialect: str, home: ShardTables, found: Sequence[CountCorrection]
) -> None:
    """Add the corrections to the rows as they are now, then delete the table's rows left at 0."""
    if found:
        params: list[Any] = []
        for correction in found:
            params.extend((correction.app_id, correction.status, home.table_index, correction.by))
        await conn.exec_driver_sql(upsert_sql(dialect, home.task_counts_sql, len(found)), tuple(params))
    c = home.task_counts.c
    await conn.execute(
        delete(home.task_counts).where(c.table_index == bindparam("table_index"), c.n == 0, c.app_id != MARKER_APP),
        {"table_index": home.table_index},
        execution_options=home.options,
    )
