"""A fire transaction locks the task count rows it changes only while the server commits it: the count
upserts ride in the round trip of its ``COMMIT``, after the node's last look at its fence (``may_commit``),
not in the round trip of its other writes. Every one-shot fire moves its table's (app, ``active``) and
(app, ``completed``) rows, and a server's committers run side by side; held across the node's round trip,
those rows made the transactions beside it wait (docs/benchmarks.md, "Count rows"). MariaDB's fire
pool only: SQLite has one writer at a time, and a server without a fire pool commits in its engine's
``begin()``."""

from __future__ import annotations

import pymysql
import pytest

from testkit.databases import connect_mysql
from tests.contract.backends import NOW_MS, intent_of, interval_planner, make_task
from tjobs.settings import StorageSettings
from tjobs.stores.sql_layout import ShardTables
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.mariadb

_LOCKED = {1205, 3572}  # lock wait timeout; NOWAIT refused


def _count_rows_free(url: str, home: ShardTables, app_id: str) -> bool:
    """Whether another session can lock ``app_id``'s count rows of ``home``'s table at once (``NOWAIT``)."""
    connection = connect_mysql(url, autocommit=False)
    try:
        with connection.cursor() as cursor:
            try:
                cursor.execute(
                    f"SELECT n FROM {home.task_counts_sql} WHERE app_id = %s AND table_index = %s FOR UPDATE NOWAIT",
                    (app_id, home.table_index),
                )
                cursor.fetchall()
            except pymysql.err.OperationalError as error:
                if error.args[0] in _LOCKED:
                    return False
                raise
            return True
    finally:
        connection.rollback()
        connection.close()


async def test_a_fire_transaction_holds_its_count_rows_only_in_its_commit(
    mariadb_store: SQLAlchemyTaskStore, mariadb_store_settings: StorageSettings
) -> None:
    if not getattr(mariadb_store, "_fire_pools", None):
        pytest.fail("the MariaDB store has no fire pool: what this test is about")
    task = await mariadb_store.insert_task(make_task(shard=6, name="once", max_fires=1))  # completes: counts move
    home = mariadb_store._shard(6)
    url = mariadb_store_settings.urls[0]
    assert _count_rows_free(url, home, task.app_id)  # nothing holds them before the fire
    free_at_fence: list[bool] = []

    def may_commit() -> bool:  # the node's last look at its fence: the writes are in, the COMMIT is not
        free_at_fence.append(_count_rows_free(url, home, task.app_id))
        return True

    [outcome] = await mariadb_store.commit_fires([intent_of(task)], NOW_MS + 5, interval_planner, may_commit)

    assert outcome.committed
    assert free_at_fence == [True]
    counts = await mariadb_store.read_task_counts(home.database.index, [task.app_id])
    assert counts[task.app_id] == {"active": 0, "completed": 1}  # the upserts did commit with the fire
