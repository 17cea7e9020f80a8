"""The searches read index ranges, never a table scan: EXPLAIN on SQLite and MariaDB, after migrate."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.dialects import mysql, sqlite

from tests.contract.backends import NOW_MS, drop_databases, make_task, mariadb_settings
from tjobs.model import FlowStatus, TaskStatus
from tjobs.settings import StorageSettings
from tjobs.specs import ScheduleKind
from tjobs.stores.migrate import migrate
from tjobs.stores.queries import FlowQuery, TaskQuery
from tjobs.stores.sql_layout import Layout, create_engine_for
from tjobs.stores.sql_search import flow_statement, task_statement
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.asyncio

# (statement maker, the index its read must use)
READS: list[tuple[Any, str]] = [
    (lambda home: task_statement(home, TaskQuery("a"), ("", 1 << 62), 11), "tasks_00_app"),
    (lambda home: task_statement(home, TaskQuery("a", name_prefix="order-"), ("order-1", 5), 11), "tasks_00_app_name"),
    (lambda home: task_statement(home, TaskQuery("a", status=TaskStatus.PAUSED), None, 11), "tasks_00_app_status"),
    (lambda home: task_statement(home, TaskQuery("a", kind=ScheduleKind.CRON), None, 11), "tasks_00_app_kind"),
    (lambda home: flow_statement(home, FlowQuery("a"), (1_800_000_000_000, 7), 11), "flows_00_app_at"),
    (
        lambda home: flow_statement(
            home, FlowQuery("a", FlowStatus.DEAD, from_ms=NOW_MS, until_ms=NOW_MS + 3000), None, 11
        ),
        "flows_00_app_status_at",
    ),
]


def sql(statement: Any, dialect: Any) -> str:
    return str(statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))


async def test_every_search_read_is_an_index_range_on_sqlite(tmp_path: Path) -> None:
    settings = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="1x1x2")
    await migrate(settings)
    home = Layout(settings).shards[0]
    with sqlite3.connect(tmp_path / "data" / "tjobs_00.db") as db:
        for make, index in READS:
            plan = " ".join(
                str(row[-1]) for row in db.execute("EXPLAIN QUERY PLAN " + sql(make(home), sqlite.dialect()))
            )
            assert f"USING INDEX {index} " in plan or f"USING COVERING INDEX {index} " in plan, plan
            assert "TEMP B-TREE" not in plan, plan  # read in the index's order: no sort


@pytest.fixture
async def mariadb(mysql_url: str) -> AsyncIterator[StorageSettings]:
    settings = mariadb_settings(mysql_url)
    try:
        yield settings
    finally:
        await drop_databases(settings)


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
    await migrate(mariadb)
    await seed(mariadb, 3000)
    layout = Layout(mariadb)
    home = layout.shards[0]
    engine = create_engine_for(home.database.engine_url, mariadb)
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql(f"USE `{home.database.name}`")
            for make, index in READS:
                explained = (await conn.exec_driver_sql("EXPLAIN " + sql(make(home), mysql.dialect()))).mappings()
                row = next(iter(explained))
                assert row["key"] == index and row["type"] in ("ref", "range"), dict(row)
                assert "filesort" not in (row["Extra"] or ""), dict(row)
    finally:
        await engine.dispose()
