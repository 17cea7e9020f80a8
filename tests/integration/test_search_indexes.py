"""The searches read index ranges, never a table scan: EXPLAIN on SQLite and MariaDB, after migrate.
On MariaDB a search's statement reads its shards with no temporary table, and a round sends each
server at most ``STATEMENTS_PER_SERVER`` statements (issue 16's search benchmark)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from sharding import TaskIdGenerator, shard_of_task_id
from testkit.mariadb_template import fresh_mariadb, release_mariadb
from tests.contract.backends import NOW_MS, drop_databases, make_task, mariadb_settings
from tjobs.model import FlowStatus, TaskStatus
from tjobs.settings import StorageSettings
from tjobs.specs import ScheduleKind
from tjobs.stores import sql_search
from tjobs.stores.migrate import migrate
from tjobs.stores.queries import FlowQuery, TaskQuery
from tjobs.stores.sql_layout import Layout, create_engine_for
from tjobs.stores.sql_search import STATEMENTS_PER_SERVER, Read, flow_read, task_read, union_sql
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.asyncio

# (statement maker, the index its read must use)
READS: list[tuple[Any, str]] = [
    (lambda home, dialect: task_read(home, TaskQuery("a"), ("", 1 << 62), 11, dialect), "tasks_00_app"),
    (
        lambda home, dialect: task_read(home, TaskQuery("a", name_prefix="order-"), ("order-1", 5), 11, dialect),
        "tasks_00_app_name",
    ),
    (
        lambda home, dialect: task_read(home, TaskQuery("a", status=TaskStatus.PAUSED), None, 11, dialect),
        "tasks_00_app_status",
    ),
    (
        lambda home, dialect: task_read(home, TaskQuery("a", kind=ScheduleKind.CRON), None, 11, dialect),
        "tasks_00_app_kind",
    ),
    (lambda home, dialect: flow_read(home, FlowQuery("a"), (1_800_000_000_000, 7), 11, dialect), "flows_00_app_at"),
    (
        lambda home, dialect: flow_read(
            home, FlowQuery("a", FlowStatus.DEAD, from_ms=NOW_MS, until_ms=NOW_MS + 3000), None, 11, dialect
        ),
        "flows_00_app_status_at",
    ),
]


async def test_every_search_read_is_an_index_range_on_sqlite(tmp_path: Path) -> None:
    settings = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="1x1x2")
    await migrate(settings)
    home = Layout(settings).shards[0]
    with sqlite3.connect(tmp_path / "data" / "tjobs_00.db") as db:
        for make, index in READS:
            read: Read = make(home, "sqlite")
            plan = " ".join(str(row[-1]) for row in db.execute("EXPLAIN QUERY PLAN " + read.sql, read.params))
            assert f"USING INDEX {index} " in plan or f"USING COVERING INDEX {index} " in plan, plan
            assert "TEMP B-TREE" not in plan, plan  # read in the index's order: no sort


@pytest.fixture
async def mariadb(mysql_url: str) -> AsyncIterator[StorageSettings]:
    """Databases as ``migrate`` leaves new ones (testkit/mariadb_template.py), statistics included."""
    settings = await fresh_mariadb(mariadb_settings(mysql_url))
    try:
        yield settings
    finally:
        release_mariadb(settings)


async def seed(settings: StorageSettings, tasks: int) -> None:
    """``tasks`` tasks of three apps in shard 0, each with one flow: the optimizer sees real statistics."""
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        made = [
            make_task(app_id="abc"[i % 3], shard=0, name=f"order-{i}", status=list(TaskStatus)[i % 3])
            for i in range(tasks)
        ]
        for start in range(0, tasks, 500):
            await store.insert_tasks(made[start : start + 500])
        rows = [
            (t.id, NOW_MS + i, t.app_id, "manual", list(FlowStatus)[i % 7].value, 1, 0, NOW_MS, NOW_MS)
            for i, t in enumerate(made)
        ]
        home = store.layout.shards[0]
        engine = create_engine_for(home.database.engine_url, settings)
        try:
            async with engine.begin() as conn:
                await conn.exec_driver_sql(
                    f"INSERT INTO {home.flows_sql} (task_id, scheduled_at, app_id, kind, status, attempts, missed, "
                    "created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    rows,
                )
                await conn.exec_driver_sql(f"ANALYZE TABLE {home.tasks_sql}, {home.flows_sql}")
        finally:
            await engine.dispose()
    finally:
        await store.close()


@pytest.mark.mariadb
async def test_every_search_read_is_an_index_range_on_mariadb(mariadb: StorageSettings) -> None:
    await seed(mariadb, 3000)
    layout = Layout(mariadb)
    home = layout.shards[0]
    engine = create_engine_for(home.database.engine_url, mariadb)
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql(f"USE `{home.database.name}`")
            for make, index in READS:
                read: Read = make(home, "mysql")
                # named, not left to statistics that STATS_AUTO_RECALC=0 leaves stale (zero after a bulk
                # load: 10M flows read dead ones along (app_id, scheduled_at), ~7 rows per row returned)
                assert f"FORCE INDEX (`{index}`)" in read.sql
                row = next(iter((await conn.exec_driver_sql("EXPLAIN " + read.sql, read.params)).mappings()))
                assert row["key"] == index and row["type"] in ("ref", "range"), dict(row)
                assert "filesort" not in (row["Extra"] or ""), dict(row)
    finally:
        await engine.dispose()


@pytest.mark.mariadb
async def test_a_statement_of_many_shards_reads_them_with_no_temporary_table(mariadb: StorageSettings) -> None:
    """Each shard's read is a parenthesized ``UNION ALL`` part, not a derived table: MariaDB
    materialized every derived ``(SELECT ... LIMIT n)`` as an on-disk temporary table (the rows carry
    TEXT columns), 16 per statement."""
    layout = Layout(mariadb)
    store = SQLAlchemyTaskStore(mariadb)
    await store.start()
    try:
        made = [make_task(app_id="a", shard=shard, name=f"order-{shard}") for shard in range(8) for _ in range(3)]
        await store.insert_tasks(made)
    finally:
        await store.close()
    homes = [layout.shards[shard] for shard in range(8)]
    engine = create_engine_for(homes[0].database.engine_url, mariadb)
    try:
        async with engine.connect() as conn:
            for reads, rows_found in (
                ([task_read(home, TaskQuery("a"), None, 2) for home in homes], 8 * 2),
                ([flow_read(home, FlowQuery("a"), None, 2) for home in homes], 0),
            ):
                statement = union_sql([read.sql for read in reads], "mysql")
                params = tuple(value for read in reads for value in read.params)
                first = await _temporary_tables(conn)
                before = await _temporary_tables(conn)  # reading the counters takes a temporary table itself
                rows = (await conn.exec_driver_sql(statement, params)).all()
                after = await _temporary_tables(conn)
                assert {name: after[name] - before[name] for name in after} == {
                    name: before[name] - first[name] for name in before
                }
                assert len(rows) == rows_found
                explained = (await conn.exec_driver_sql("EXPLAIN " + statement, params)).mappings().all()
                assert [row["select_type"] for row in explained if row["select_type"] != "UNION RESULT"] == [
                    "PRIMARY",
                    *["UNION"] * 7,
                ]
    finally:
        await engine.dispose()


async def _temporary_tables(conn: AsyncConnection) -> dict[str, int]:
    rows = await conn.exec_driver_sql(
        "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.SESSION_STATUS "
        "WHERE VARIABLE_NAME IN ('CREATED_TMP_TABLES', 'CREATED_TMP_DISK_TABLES')"
    )
    return {str(row["VARIABLE_NAME"]): int(row["VARIABLE_VALUE"]) for row in rows.mappings()}


@pytest.mark.mariadb
async def test_a_search_round_sends_each_server_at_most_a_few_statements(mysql_url: str) -> None:
    """64 shards in 8 logical databases of one server: one round is ``STATEMENTS_PER_SERVER``
    statements (not one per logical database, nor per shard), and finds every shard's rows."""
    settings = StorageSettings(
        urls=[mysql_url], topology="2x4x8", database_prefix=mariadb_settings(mysql_url).database_prefix
    )
    await migrate(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        shards = list(range(store.topology.shard_count))
        ids = TaskIdGenerator(store.topology.shard_count)
        made = [
            replace(make_task(app_id="a", name=f"order-{shard}"), id=ids.mint(shard, NOW_MS + shard))
            for shard in shards
        ]
        await store.insert_tasks(made)
        opened: list[str] = []

        @asynccontextmanager
        async def counting(url: str) -> AsyncIterator[AsyncConnection]:
            opened.append(url)
            async with store._connect(url) as conn:
                yield conn

        found = await sql_search.search_tasks(store._shard, counting, TaskQuery("a"), dict.fromkeys(shards), 5)
        assert len(opened) == STATEMENTS_PER_SERVER
        assert {shard: [task.id for task in tasks] for shard, tasks in found.items()} == {
            shard: [task.id for task in made if shard_of_task_id(task.id) == shard] for shard in shards
        }
    finally:
        await store.close()
        await drop_databases(settings)
