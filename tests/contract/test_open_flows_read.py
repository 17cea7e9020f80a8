"""What a judged fire reads (``RunRecords.open_flows_of_task``, docs/pools.md "Across nodes"): the task's open
flows along the ``(app_id, status, task_id)`` index at the task, however long its app's and its own history and
however many open flows its app's other tasks have (the ``(app_id, status, scheduled_at, task_id)`` index would walk
them all: index condition pushdown tests each without counting a ``Handler_read_next``, so MariaDB's test counts
``Handler_icp_attempts`` too).
Left to choose, SQLite's planner walked the app's whole history in instant order (``flows_TT_app_at``) for the
``ORDER BY ... LIMIT``; the read names its index (SQLite ``INDEXED BY``, MariaDB ``FORCE INDEX``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncConnection

from tests.contract.backends import NOW_MS, make_task, wipe
from tjobs.model import Flow, FlowKind, FlowStatus
from tjobs.settings import StorageSettings
from tjobs.stores.sql.connections import SqlBase
from tjobs.stores.sql_layout import create_engine_for
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

SHARD = 5
_OPEN_SQL = ", ".join(f"'{s.value}'" for s in FlowStatus if not s.terminal)


async def _store(settings: StorageSettings) -> SQLAlchemyTaskStore:
    await wipe(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    return store


async def test_on_sqlite_the_read_searches_the_index_at_the_task(sqlite_store_settings: StorageSettings) -> None:
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "task_id = ?" in statement:
            sent.append((statement, parameters))

    store = await _store(sqlite_store_settings)
    try:
        task = await store.insert_task(make_task(shard=SHARD))
        event.listen(Engine, "before_cursor_execute", record)
        try:
            await store.open_flows_of_task(task.app_id, task.id, 100)
        finally:
            event.remove(Engine, "before_cursor_execute", record)
        statement, parameters = sent[0]
        home = store.layout.shards[SHARD]
        engine = create_engine_for(home.database.engine_url, sqlite_store_settings)
        try:
            async with engine.connect() as conn:
                plan = (await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)).all()
        finally:
            await engine.dispose()
    finally:
        await store.close()
    details = " / ".join(str(row[-1]) for row in plan)
    assert f"USING INDEX {home.flows.name}_app_status (app_id=? AND status=? AND task_id=?)" in details, details


async def _handlers(conn: AsyncConnection) -> dict[str, int]:
    rows: list[Any] = list((await conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Handler%%'")).all())
    return {str(row[0]): int(row[1]) for row in rows}


def _spent(after: dict[str, int], before: dict[str, int], idle: dict[str, int]) -> dict[str, int]:
    return {name: after[name] - before.get(name, 0) - idle.get(name, 0) for name in after}


@pytest.mark.mariadb
async def test_on_mariadb_the_read_examines_the_tasks_open_flows_not_its_history(
    mariadb_store_settings: StorageSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    spent: list[dict[str, int]] = []
    original = SqlBase._connect

    @asynccontextmanager
    async def measured(self: SqlBase, url: str) -> AsyncIterator[AsyncConnection]:
        async with original(self, url) as conn:
            first = await _handlers(conn)
            idle = _spent(await _handlers(conn), first, {})
            before = await _handlers(conn)
            yield conn
            spent.append(_spent(await _handlers(conn), before, idle))

    store = await _store(mariadb_store_settings)
    try:
        task = await store.insert_task(make_task(shard=SHARD))
        home = store.layout.shards[SHARD]
        columns = (
            f"INSERT INTO {home.flows_sql} (task_id, scheduled_at, app_id, kind, status, attempts, "
            "next_attempt_at, missed, created_at, updated_at) "
        )
        engine = create_engine_for(home.database.engine_url, mariadb_store_settings)
        try:
            async with engine.begin() as conn:  # 20,000 delivered flows of the task and 20,000 of another of its app
                for task_id in (task.id, task.id + 1):
                    await conn.exec_driver_sql(
                        f"{columns}SELECT {task_id}, {NOW_MS - 10**9} + seq, '{task.app_id}', 'scheduled', "
                        f"'delivered', 1, NULL, 0, {NOW_MS}, {NOW_MS} FROM `{home.database.name}`.seq_0_to_19999"
                    )
                # 6,000 open flows of 6,000 other tasks of the app, ids on both sides of the task's, every open
                # status: the (app_id, status, scheduled_at, task_id) index would walk them all to find the task's
                await conn.exec_driver_sql(
                    f"{columns}SELECT {task.id} + IF(MOD(seq, 2) = 0, 2 + seq DIV 2, -CAST(2 + seq DIV 2 AS SIGNED)), "
                    f"{NOW_MS} + seq, '{task.app_id}', 'scheduled', ELT(1 + MOD(seq, 4), {_OPEN_SQL}), 0, "
                    f"{NOW_MS} + seq, 0, {NOW_MS}, {NOW_MS} FROM `{home.database.name}`.seq_0_to_5999"
                )
        finally:
            await engine.dispose()
        own = [FlowStatus.PENDING] * 3 + [FlowStatus.SENDING, FlowStatus.RUNNING]
        for k, status in enumerate(own):
            at = NOW_MS + k
            open_ = Flow(task.id, at, task.app_id, FlowKind.SCHEDULED, status, 0, at, at, at)
            await store.insert_manual_flow(task.id, open_)
        monkeypatch.setattr(SqlBase, "_connect", measured)
        found = await store.open_flows_of_task(task.app_id, task.id, 100)
    finally:
        monkeypatch.undo()
        await store.close()
    assert [f.scheduled_at_ms for f in found[:3]] == [NOW_MS, NOW_MS + 1, NOW_MS + 2]
    assert [(f.scheduled_at_ms, f.status) for f in found] == [(NOW_MS + k, s) for k, s in enumerate(own)]
    assert spent, spent
    counted = {name: n for name, n in spent[-1].items() if n}
    reads = sum(n for name, n in counted.items() if name.startswith("Handler_read"))
    assert reads <= 40, counted  # the index's ranges at the task: a few entries, not 40,000 rows
    # entries examined: index condition pushdown tests the rows of a range without counting a read
    # (Handler_icp_attempts), so a walk of the app's 6,000 open flows leaves Handler_read_* as small as the
    # task's own range does; the right index examines the task's 5 open flows, the wrong one thousands
    examined = counted.get("Handler_icp_attempts", 0) + counted.get("Handler_read_next", 0)
    assert examined <= 4 * len(own), counted  # seen: 5 + 5 here; 6,005 + 5 along (app_id, status, scheduled_at, ...)
