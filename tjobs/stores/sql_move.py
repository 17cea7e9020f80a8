"""Copying one logical database to another MariaDB server while it is written (the SQL of
``tjobs shards move``; :mod:`tjobs.cluster.shard_move` runs the steps and records them).

**Why a chunked copy with change capture, not MariaDB replication.** Replication copies a whole
server's binlog stream: catching up just one logical database means a replica filtered with
``replicate_do_db`` (a server-wide setting, restarted per move), a consistent snapshot taken with
``mariadb-dump --single-transaction --master-data`` plus a replication channel on the target, and
``REPLICATION SLAVE``/``SUPER`` privileges the nodes' user lacks and a binlog the server may not keep.
A chunked copy needs nothing but the nodes' own ``SELECT``/``INSERT``/``TRIGGER`` rights, runs on
any pair of servers, is resumable at any step (every step is idempotent), and copies exactly the
database's tables; its cost is a trigger write per changed row while the move runs.

The steps, each safe to repeat after a crash:

1. :meth:`DatabaseCopy.prepare`: the target database with the source's tables (``SHOW CREATE
   TABLE``), its fence at :data:`tjobs.stores.shard_fence.RETIRED_EPOCH` (nobody writes it yet), the
   change table :data:`CHANGES` in the source database, and on each source table with a primary key
   ``AFTER INSERT/UPDATE/DELETE`` triggers that record the row's key there, in the writing transaction.
2. :meth:`DatabaseCopy.copy`: every table, in primary-key order, ``batch_rows`` at a time
   (``REPLACE``: a row copied twice is the same row), resting after each batch as its
   :class:`~tjobs.stores.copy_pace.CopyPace` says. A row changed after its batch was read has its
   key in the change table.
3. :meth:`DatabaseCopy.catch_up`: take the oldest recorded keys, re-read those rows on the source and
   make the target's the same (deleted if gone), then forget those keys; the change table is a queue,
   so a key changed again is queued again. Never run alongside step 2 (a batch read before a delete
   and written after it would bring the row back), so it starts only once the copy ended.
4. Cut-over (:mod:`tjobs.cluster.shard_move`): the source's fence goes to ``RETIRED`` (the ``UPDATE``
   waits for every writer holding the fence's share lock; every writer after it is refused), the
   last keys are caught up, the target's fence goes to the new map epoch, and the map names the
   target. :meth:`DatabaseCopy.stop_capture` removes the triggers and the change table.

Only identifiers from the topology (database and table names) are put into SQL text.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tjobs.stores.contracts.shard_admin import MoveRow
from tjobs.stores.copy_pace import UNPACED, CopyPace
from tjobs.stores.schema import SHARD_FENCE_TABLE
from tjobs.stores.shard_fence import RETIRED_EPOCH

CHANGES = "tjobs_move_changes"
"""The change table of a database being moved (on the source): one row per written key."""

_SKIPPED = {SHARD_FENCE_TABLE, CHANGES}
_EVENTS = {"insert": "NEW", "update": "NEW", "delete": "OLD"}


@dataclass(frozen=True, slots=True)
class CopiedTable:
    name: str
    key: tuple[str, ...]  # the primary key's columns, in order
    columns: tuple[str, ...]  # every stored column (generated ones are computed by the target itself)

    @property
    def select_list(self) -> str:
        return ", ".join(_quote(column) for column in self.columns)


def _quote(name: str) -> str:
    return f"`{name.replace('`', '``')}`"


class DatabaseCopy:
    """Moves the rows of database ``schema`` from the ``source`` server to the ``target`` server,
    resting after each batch of the copy and of a paced catch-up as ``pace`` says."""

    def __init__(
        self,
        source: AsyncEngine,
        target: AsyncEngine,
        schema: str,
        batch_rows: int = 2000,
        pace: CopyPace = UNPACED,
        rest: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.source = source
        self.target = target
        self.schema = schema
        self.batch_rows = batch_rows
        self.pace = pace
        self._rest = rest
        self._tables: list[CopiedTable] | None = None

    async def _paced(self, pace: CopyPace, rows: int, started: float) -> None:
        rest_s = pace.rest_s(rows, time.monotonic() - started)
        if rest_s > 0:
            await self._rest(rest_s)

    def qualified(self, table: str) -> str:
        return f"{_quote(self.schema)}.{_quote(table)}"

    # ---- step 1 ---------------------------------------------------------------------------------

    async def tables(self) -> list[CopiedTable]:
        """The source database's tables that are copied (all but the fence and the change table)."""
        if self._tables is None:
            async with self.source.connect() as conn:
                rows = await _rows(
                    conn,
                    "SELECT t.TABLE_NAME, k.COLUMN_NAME FROM information_schema.TABLES t "
                    "JOIN information_schema.KEY_COLUMN_USAGE k ON k.TABLE_SCHEMA = t.TABLE_SCHEMA "
                    "AND k.TABLE_NAME = t.TABLE_NAME AND k.CONSTRAINT_NAME = 'PRIMARY' "
                    "WHERE t.TABLE_SCHEMA = %s AND t.TABLE_TYPE = 'BASE TABLE' "
                    "ORDER BY t.TABLE_NAME, k.ORDINAL_POSITION",
                    (self.schema,),
                )
                keys: dict[str, list[str]] = defaultdict(list)
                for table, column in rows:
                    keys[str(table)].append(str(column))
                every = await _rows(
                    conn,
                    "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_TYPE = 'BASE TABLE'",
                    (self.schema,),
                )
                keyless = sorted({str(name) for (name,) in every} - set(keys) - _SKIPPED)
                if keyless:  # a batch copy and a key capture need a primary key
                    raise ValueError(f"{self.schema} has tables without a primary key: {', '.join(keyless)}")
                stored: dict[str, list[str]] = defaultdict(list)
                for table, column in await _rows(
                    conn,
                    "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                    "AND IS_GENERATED = 'NEVER' ORDER BY TABLE_NAME, ORDINAL_POSITION",
                    (self.schema,),
                ):
                    stored[str(table)].append(str(column))
            self._tables = [
                CopiedTable(name, tuple(key), tuple(stored[name]))
                for name, key in sorted(keys.items())
                if name not in _SKIPPED
            ]
        return self._tables

    async def prepare(self) -> bool:
        """Step 1: the target's database and tables (fence retired), the change table and triggers.

        Only what is missing is created: asked first, not left to ``IF NOT EXISTS``, which the server
        answers with a note per table and trigger found (the driver logs each as a warning: about 200
        at a rerun on the default topology). Returns whether all of it was there already, the capture
        running since an earlier run and every table still on the target: the tables that run copied
        whole need not be copied again (:meth:`copy`'s ``done``)."""
        async with self.source.connect() as conn:
            names = await _names(
                conn,
                "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                "AND TABLE_TYPE = 'BASE TABLE'",
                self.schema,
            )
            triggers = await _names(
                conn, "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s", self.schema
            )
            copied = sorted(names - {CHANGES})
            on_target = set(await self._table_names(self.target))
            creates = []
            for name in copied:
                if name not in on_target:
                    (shown,) = await _rows(conn, f"SHOW CREATE TABLE {self.qualified(name)}")
                    creates.append(str(shown[1]).replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1))
        async with self.target.begin() as conn:
            if not on_target:
                await conn.exec_driver_sql(f"CREATE DATABASE IF NOT EXISTS {_quote(self.schema)}")
            if creates:
                await conn.exec_driver_sql(f"USE {_quote(self.schema)}")
            for create in creates:
                await conn.exec_driver_sql(create)
            await conn.exec_driver_sql(
                f"INSERT INTO {self.qualified(SHARD_FENCE_TABLE)} (id, epoch) VALUES (1, %s) "
                "ON DUPLICATE KEY UPDATE epoch = VALUES(epoch)",
                (RETIRED_EPOCH,),
            )
        capturing = CHANGES in names
        async with self.source.begin() as conn:
            if not capturing:
                await conn.exec_driver_sql(
                    f"CREATE TABLE IF NOT EXISTS {self.qualified(CHANGES)} ("
                    "seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, tbl VARCHAR(64) NOT NULL, "
                    "row_key VARCHAR(1024) NOT NULL) ENGINE=InnoDB STATS_AUTO_RECALC=0"
                )
            for table in await self.tables():
                for event, row in _EVENTS.items():
                    trigger = _trigger(table.name, event)
                    if trigger in triggers:
                        continue
                    capturing = False
                    values = ", ".join(f"{row}.{_quote(column)}" for column in table.key)
                    await conn.exec_driver_sql(
                        f"CREATE TRIGGER IF NOT EXISTS {self.qualified(trigger)} "
                        f"AFTER {event.upper()} ON {self.qualified(table.name)} FOR EACH ROW "
                        f"INSERT INTO {self.qualified(CHANGES)} (tbl, row_key) "
                        f"VALUES ('{table.name}', JSON_ARRAY({values}))"
                    )
        return capturing and not creates

    async def stop_capture(self) -> None:
        """Drop the triggers and the change table (after the cut-over, or on an abort)."""
        async with self.source.begin() as conn:
            for table in await self.tables():
                for event in _EVENTS:
                    await conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {self.qualified(_trigger(table.name, event))}")
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.qualified(CHANGES)}")

    # ---- step 2 ---------------------------------------------------------------------------------

    async def copy(
        self,
        progress: Callable[[str, int], Awaitable[None]] | None = None,
        *,
        done: Collection[str] = (),
        table_copied: Callable[[str, int], Awaitable[None]] | None = None,
    ) -> int:
        """Step 2: every row of every table but those in ``done`` (copied whole by an earlier run, the
        capture running since), batch by batch in primary-key order; returns the rows this call copied.
        ``progress(table, rows_so_far)`` is awaited after each batch, ``table_copied(table, rows)`` after
        a table's last."""
        copied = 0
        for table in await self.tables():
            if table.name in done:
                continue
            rows_of_table = 0
            after: tuple[Any, ...] | None = None
            while True:
                started = time.monotonic()
                where, params = _after(table.key, after)
                order = ", ".join(_quote(column) for column in table.key)
                async with self.source.connect() as conn:
                    result = await conn.exec_driver_sql(
                        f"SELECT {table.select_list} FROM {self.qualified(table.name)} {where} "
                        f"ORDER BY {order} LIMIT {self.batch_rows}",
                        tuple(params),
                    )
                    columns = list(result.keys())
                    rows = [tuple(row) for row in result]
                if not rows:
                    break
                async with self.target.begin() as conn:
                    await _replace(conn, self.qualified(table.name), columns, rows)
                await self._paced(self.pace, len(rows), started)
                copied += len(rows)
                rows_of_table += len(rows)
                if progress is not None:
                    await progress(table.name, copied)
                positions = [columns.index(column) for column in table.key]
                after = tuple(rows[-1][p] for p in positions)
                if len(rows) < self.batch_rows:
                    break
            if table_copied is not None:
                await table_copied(table.name, rows_of_table)
        return copied

    # ---- step 3 ---------------------------------------------------------------------------------

    async def backlog(self) -> int:
        async with self.source.connect() as conn:
            return int((await conn.exec_driver_sql(f"SELECT COUNT(*) FROM {self.qualified(CHANGES)}")).scalar_one())

    async def catch_up(self, rounds: int | None = None, paced: bool = True) -> int:
        """Step 3: apply the queued keys, oldest first, until none is left (or ``rounds`` batches),
        resting after each batch as the pace says unless not ``paced``; returns how many keys were
        applied."""
        applied = 0
        done = 0
        tables = {table.name: table for table in await self.tables()}
        pace = self.pace if paced else UNPACED
        while rounds is None or done < rounds:
            started = time.monotonic()
            async with self.source.connect() as conn:
                queued = [
                    (int(seq), str(tbl), tuple(orjson.loads(row_key)))
                    for seq, tbl, row_key in await _rows(
                        conn,
                        f"SELECT seq, tbl, row_key FROM {self.qualified(CHANGES)} ORDER BY seq LIMIT {self.batch_rows}",
                    )
                ]
            if not queued:
                break
            keys: dict[str, set[tuple[Any, ...]]] = defaultdict(set)
            for _, tbl, key in queued:
                keys[tbl].add(key)
            for tbl, table_keys in keys.items():
                await self._sync(tables[tbl], sorted(table_keys))
            async with self.source.begin() as conn:
                seqs = [seq for seq, _, _ in queued]
                marks = ", ".join(["%s"] * len(seqs))
                await conn.exec_driver_sql(f"DELETE FROM {self.qualified(CHANGES)} WHERE seq IN ({marks})", tuple(seqs))
            await self._paced(pace, len(queued), started)
            applied += len(queued)
            done += 1
        return applied

    async def _sync(self, table: CopiedTable, keys: Sequence[tuple[Any, ...]]) -> None:
        """Make the target's rows of ``keys`` what the source holds now (absent if the source has none)."""
        match, params = _keys_in(table.key, keys)
        async with self.source.connect() as conn:
            result = await conn.exec_driver_sql(
                f"SELECT {table.select_list} FROM {self.qualified(table.name)} WHERE {match}", params
            )
            columns = list(result.keys())
            rows = [tuple(row) for row in result]
        async with self.target.begin() as conn:
            await conn.exec_driver_sql(f"DELETE FROM {self.qualified(table.name)} WHERE {match}", params)
            if rows:
                await _replace(conn, self.qualified(table.name), columns, rows)

    # ---- checks -----------------------------------------------------------------------------------

    async def row_counts(self, engine: AsyncEngine) -> dict[str, int]:
        async with engine.connect() as conn:
            return {
                table.name: int(
                    (await conn.exec_driver_sql(f"SELECT COUNT(*) FROM {self.qualified(table.name)}")).scalar_one()
                )
                for table in await self.tables()
            }

    async def drop_on(self, engine: AsyncEngine) -> None:
        """``DROP DATABASE`` of this copy on ``engine``'s server.

        MariaDB 10.11 can leave a ``CREATE TRIGGER``'s backup of its table's trigger file
        (``<table>.TRG-``) in the database's directory: the statement deletes it only if its DDL log
        entry is no longer active, and another session's DDL may have taken that entry over in between.
        ``DROP DATABASE`` then drops every table but fails on the directory (errno 39), and no SQL
        removes a file by name. So where that happens, each table the copy had is created again, empty,
        with two triggers: the second ``CREATE TRIGGER`` backs the trigger file up to that same name and
        deletes the backup, and the database is dropped again. A directory still not empty after that
        holds files the server does not know; the error is raised (its tables are gone; remove the files
        on that server and run the drop again)."""
        names = await self._table_names(engine)
        try:
            await self._drop_database(engine)
        except OperationalError as error:
            if DIRECTORY_NOT_EMPTY not in str(error.orig):
                raise
            if not names:  # a drop that failed before dropped them: the other copy has the same tables
                names = await self._table_names(self.target if engine is self.source else self.source)
            await self._sweep_trigger_file_backups(engine, names)
            await self._drop_database(engine)

    async def _drop_database(self, engine: AsyncEngine) -> None:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {_quote(self.schema)}")

    async def _table_names(self, engine: AsyncEngine) -> list[str]:
        async with engine.connect() as conn:
            return sorted(
                await _names(
                    conn, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", self.schema
                )
            )

    async def _sweep_trigger_file_backups(self, engine: AsyncEngine, names: Sequence[str]) -> None:
        async with engine.connect() as conn:
            for number, name in enumerate(names):
                table = self.qualified(name)
                await conn.exec_driver_sql(f"CREATE TABLE IF NOT EXISTS {table} (id INT PRIMARY KEY)")
                for event in ("INSERT", "UPDATE"):
                    trigger = self.qualified(f"tjobs_sweep_{number}_{event.lower()}")
                    await conn.exec_driver_sql(
                        f"CREATE TRIGGER IF NOT EXISTS {trigger} AFTER {event} ON {table} "
                        "FOR EACH ROW SET @tjobs_sweep = 1"
                    )

    async def exists_on(self, engine: AsyncEngine) -> bool:
        async with engine.connect() as conn:
            found = await conn.exec_driver_sql(
                "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (self.schema,)
            )
            return bool(found.scalar_one())


DIRECTORY_NOT_EMPTY = 'errno: 39 "Directory not empty"'  # DROP DATABASE found files it did not drop


def _trigger(table: str, event: str) -> str:
    return f"tjobs_move_{table}_{event}"[:64]


def _after(key: tuple[str, ...], after: tuple[Any, ...] | None) -> tuple[str, list[Any]]:
    """``WHERE`` rows strictly after ``after`` in key order, as a range the primary key serves
    (``a >= x AND (a > x OR (a = x AND b > y))``); empty for the first batch."""
    if after is None:
        return "", []
    first = _quote(key[0])
    alternatives: list[str] = []
    params: list[Any] = [after[0]]
    for length in range(1, len(key) + 1):
        equal = [f"{_quote(column)} = %s" for column in key[: length - 1]]
        alternatives.append("(" + " AND ".join([*equal, f"{_quote(key[length - 1])} > %s"]) + ")")
        params.extend([*after[: length - 1], after[length - 1]])
    return f"WHERE {first} >= %s AND (" + " OR ".join(alternatives) + ")", params


def _keys_in(key: tuple[str, ...], keys: Sequence[tuple[Any, ...]]) -> tuple[str, tuple[Any, ...]]:
    one = "(" + " AND ".join(f"{_quote(column)} = %s" for column in key) + ")"
    return " OR ".join([one] * len(keys)), tuple(value for row in keys for value in row)


async def _replace(conn: AsyncConnection, table: str, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    names = ", ".join(_quote(column) for column in columns)
    marks = "(" + ", ".join(["%s"] * len(columns)) + ")"
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    cursor = driver.cursor()
    try:
        await cursor.execute(
            f"REPLACE INTO {table} ({names}) VALUES " + ", ".join([marks] * len(rows)),
            tuple(value for row in rows for value in row),
        )
    finally:
        await cursor.close()


async def _rows(conn: AsyncConnection, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in await conn.exec_driver_sql(sql, params)]


async def _names(conn: AsyncConnection, sql: str, schema: str) -> set[str]:
    """The first column of ``sql``'s rows (an ``information_schema`` query on ``schema``), as strings."""
    return {str(row[0]) for row in await _rows(conn, sql, (schema,))}


# ---- the record of moves in progress (in the first logical database, which never moves) ------------

MOVES = "tjobs_shard_moves"


_COLUMNS = (
    "database_index, source, target, state, source_fence, epoch, rows_copied, lag_rows, started_at_ms, "
    "finished_at_ms, cut_over_pause_ms, tables_copied"
)
_PROGRESS_COLUMNS = (  # added to a table recorded before moves kept their progress
    "rows_copied BIGINT NOT NULL DEFAULT 0",
    "lag_rows BIGINT NOT NULL DEFAULT 0",
    "started_at_ms BIGINT NOT NULL DEFAULT 0",
    "finished_at_ms BIGINT NULL",
    "cut_over_pause_ms BIGINT NULL",
    "tables_copied TEXT NULL",  # a JSON object: table → rows, each table the copy finished
)


async def recorded_moves(conn: AsyncConnection, schema: str) -> list[MoveRow]:
    """The moves recorded in database ``schema`` (the first logical database), read only; none before
    the first move (no table yet, or one from before moves kept their progress). Operators' reads."""
    found = await conn.exec_driver_sql(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (schema, MOVES),
    )
    present = {str(name) for (name,) in found}
    if "cut_over_pause_ms" not in present:
        return []
    return await _select_moves(conn, f"{_quote(schema)}.{_quote(MOVES)}", "tables_copied" in present)


async def _select_moves(conn: AsyncConnection, table: str, with_tables: bool = True) -> list[MoveRow]:
    columns = _COLUMNS if with_tables else _COLUMNS.replace("tables_copied", "NULL")  # the mover adds it
    rows = await _rows(conn, f"SELECT {columns} FROM {table} ORDER BY database_index")
    return [
        MoveRow(
            int(d), str(s), str(t), str(st), int(f), int(e), int(c), int(lag), int(begun),
            None if ended is None else int(ended), None if pause is None else int(pause),
            _tables_copied(tables),
        )
        for d, s, t, st, f, e, c, lag, begun, ended, pause, tables in rows
    ]  # fmt: skip


def _tables_copied(text: str | bytes | None) -> tuple[tuple[str, int], ...]:
    if not text:
        return ()
    return tuple((str(table), int(rows)) for table, rows in orjson.loads(text).items())


class MoveRecords:
    """The ``tjobs_shard_moves`` table of ``schema`` (the first logical database) on ``engine``."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self.engine = engine
        self.schema = schema
        self.table = f"{_quote(schema)}.{_quote(MOVES)}"
        self._ensured = False

    async def _ensure(self, conn: AsyncConnection) -> None:
        if self._ensured:
            return
        # Asked first, not left to IF NOT EXISTS: the server answers a clause that finds the table or
        # column there with a note, which the driver logs as a warning at every mover run.
        present = {
            str(name)
            for (name,) in await _rows(
                conn,
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (self.schema, MOVES),
            )
        }
        if not present:
            await conn.exec_driver_sql(
                f"CREATE TABLE IF NOT EXISTS {self.table} (database_index INT NOT NULL PRIMARY KEY, "
                "source VARCHAR(255) NOT NULL, target VARCHAR(255) NOT NULL, state VARCHAR(16) NOT NULL, "
                "source_fence BIGINT NOT NULL, epoch BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL, "
                f"{', '.join(_PROGRESS_COLUMNS)}) ENGINE=InnoDB STATS_AUTO_RECALC=0"
            )
        else:
            for column in _PROGRESS_COLUMNS:
                if column.split(" ", 1)[0] not in present:
                    await conn.exec_driver_sql(f"ALTER TABLE {self.table} ADD COLUMN IF NOT EXISTS {column}")
        self._ensured = True

    async def all(self) -> list[MoveRow]:
        async with self.engine.begin() as conn:
            await self._ensure(conn)
            return await _select_moves(conn, self.table)

    async def get(self, database: int) -> MoveRow | None:
        return next((row for row in await self.all() if row.database == database), None)

    async def put(self, row: MoveRow, now_ms: int) -> None:
        async with self.engine.begin() as conn:
            await self._ensure(conn)
            await conn.exec_driver_sql(
                f"REPLACE INTO {self.table} ({_COLUMNS}, updated_at_ms) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    row.database, row.source, row.target, row.state, row.source_fence, row.epoch,
                    row.rows_copied, row.lag_rows, row.started_at_ms, row.finished_at_ms,
                    row.cut_over_pause_ms, orjson.dumps(dict(row.tables_copied)).decode(), now_ms,
                ),
            )  # fmt: skip

    async def delete(self, database: int) -> None:
        async with self.engine.begin() as conn:
            await self._ensure(conn)
            await conn.exec_driver_sql(f"DELETE FROM {self.table} WHERE database_index = %s", (database,))
