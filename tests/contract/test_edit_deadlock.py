"""An edit of a task that MariaDB picks as a deadlock's victim (1213) is run again, not answered 500.

A pause locks its task's row, then adds its change to the task counts (``task_counts``: one row per app,
status and table). A transaction holding a count row that then asks for the task's row deadlocks with it;
InnoDB rolls back the smaller one, here the edit, whose whole transaction is then run again once the other
ended. Real MariaDB sessions: the twin and SQLite (one writer at a time) never deadlock."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from asyncmy.errors import OperationalError as DriverOperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from tests.contract.backends import make_task
from tests.contract.test_store_task_counts_contract import assert_exact
from tjobs.errors import StorageUnavailable
from tjobs.model import TaskStatus
from tjobs.stores.sql.connections import DEADLOCK_RETRIES
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.mariadb


async def test_an_edit_that_loses_a_deadlock_is_run_again(mariadb_store: SQLAlchemyTaskStore) -> None:
    store = mariadb_store
    task = await store.insert_task(make_task(shard=0))
    home = store.layout.shards[0]
    engine = store._engine(home.database.engine_url, write=True)
    async with engine.connect() as other:
        # Given another transaction that changed rows (larger than the edit: InnoDB rolls the edit back) and holds
        # the count row the pause adds its change to
        await other.begin()
        where = f"app_id = 'app-a' AND status = 'active' AND table_index = {home.table_index}"
        await other.exec_driver_sql(f"UPDATE {home.task_counts_sql} SET n = n + 0 WHERE {where}")
        columns = "(app_id, status, table_index, n)"
        for index in range(20):
            await other.exec_driver_sql(
                f"INSERT INTO {home.task_counts_sql} {columns} VALUES ('x-{index}', 'active', 0, 1)"
            )

        # When the pause waits for that row, holding its task's row, and the other transaction asks for the task's
        pause = asyncio.create_task(
            store.edit_task(replace(task, status=TaskStatus.PAUSED), {"status"}, from_status=TaskStatus.ACTIVE)
        )
        await asyncio.sleep(0.5)
        assert not pause.done()
        await other.exec_driver_sql(f"SELECT id FROM {home.tasks_sql} WHERE id = {task.id} FOR UPDATE")
        await other.rollback()

    # Then the pause is stored, once, and the counts are exact
    paused = await asyncio.wait_for(pause, 10)
    assert paused.status is TaskStatus.PAUSED
    stored = await store.get_task(task.id)
    assert stored is not None and stored.status is TaskStatus.PAUSED
    await assert_exact(store, {"app-a": {"paused": 1}})


async def test_a_write_that_keeps_losing_deadlocks_is_refused_as_storage_unavailable(
    mariadb_store: SQLAlchemyTaskStore,
) -> None:
    url = mariadb_store.layout.shards[0].database.engine_url
    runs = 0

    async def always_the_victim(conn: AsyncConnection) -> None:
        nonlocal runs
        runs += 1
        await conn.exec_driver_sql("SELECT 1")
        raise DriverOperationalError(1213, "Deadlock found when trying to get lock; try restarting transaction")

    # A transaction rolled back as a deadlock's victim every time is run DEADLOCK_RETRIES more times, then refused
    # as a 503 naming the deadlock (never a raw driver error, which the API answers 500)
    with pytest.raises(StorageUnavailable, match="deadlock") as refused:
        await mariadb_store._in_write(url, always_the_victim)
    assert runs == 1 + DEADLOCK_RETRIES
    assert refused.value.status_code == 503
