"""The cycle load's query on MariaDB (``tjobs.stores.sql_load``): on the server's direct pool, not through
SQLAlchemy's engine; the same rows as the engine's statement; the same errors; a cancelled load leaves
no half-read connection in the pool."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pymysql
import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url

from testkit.mariadb_template import fresh_mariadb, release_mariadb
from tests.contract.backends import NOW_MS, make_task, mariadb_settings
from tjobs.errors import StorageUnavailable
from tjobs.model import MisfirePolicy, TaskStatus
from tjobs.settings import StorageSettings
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.mariadb

SHARD = 5


@pytest.fixture
async def settings(mysql_url: str) -> AsyncIterator[StorageSettings]:
    # one direct connection: the next call reuses the one a cancelled load had
    settings = await fresh_mariadb(mariadb_settings(mysql_url).model_copy(update={"pool_size": 1}))
    try:
        yield settings
    finally:
        release_mariadb(settings)


@pytest.fixture
async def store(settings: StorageSettings) -> AsyncIterator[SQLAlchemyTaskStore]:
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        yield store
    finally:
        await store.close()


def forms() -> dict[str, tuple[int, tuple[int, int] | None, tuple[int, int] | None]]:
    """before_ms, after, skip of each form of the statement (first pages and later ones)."""
    return {
        "plain": (NOW_MS + 1_000, None, None),
        "after": (NOW_MS + 1_000, (NOW_MS + 300, 0), None),
        "skip": (NOW_MS + 1_000, None, (NOW_MS + 200, NOW_MS + 600)),
        "skip, after below it": (NOW_MS + 1_000, (NOW_MS + 100, 0), (NOW_MS + 200, NOW_MS + 600)),
        "skip, after above it": (NOW_MS + 1_000, (NOW_MS + 700, 0), (NOW_MS + 200, NOW_MS + 600)),
    }


async def test_the_load_runs_on_the_direct_pool_and_reads_what_the_engine_reads(store: SQLAlchemyTaskStore) -> None:
    assert store._direct, "a plain MariaDB URL gets a direct pool"
    policies = list(MisfirePolicy)
    tasks = [
        replace(
            make_task(
                shard=SHARD,
                next_run_at_ms=NOW_MS + (i * 37) % 1_100,
                status=TaskStatus.PAUSED if i % 7 == 0 else TaskStatus.ACTIVE,
            ),
            misfire_policy=policies[i % len(policies)],
        )
        for i in range(60)
    ]
    await store.insert_tasks(tasks)
    checkouts: list[int] = []
    for engine in {*store._engines.values(), *store._writers.values()}:
        event.listen(engine.sync_engine.pool, "checkout", lambda *_: checkouts.append(1))

    direct = {
        name: [await store.load_due(SHARD, before_ms, limit, after, skip) for limit in (1, 7, 100)]
        for name, (before_ms, after, skip) in forms().items()
    }
    assert checkouts == []

    pools = dict(store._direct)
    store._direct.clear()  # as for a URL with options sql_direct does not translate: the engine's statement
    try:
        for name, (before_ms, after, skip) in forms().items():
            through_engine = [await store.load_due(SHARD, before_ms, limit, after, skip) for limit in (1, 7, 100)]
            assert direct[name] == through_engine, name
            assert through_engine[-1], name
        assert checkouts
    finally:
        store._direct.update(pools)  # closed with the store


async def test_an_unreachable_server_is_storage_unavailable_for_the_load() -> None:
    settings = StorageSettings(urls=["mysql+asyncmy://tjobs:s3cret@127.0.0.1:1"], topology="2x2x4", connect_timeout_s=1)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        assert store._direct
        for after, skip in ((None, None), ((NOW_MS, 1), (NOW_MS + 10, NOW_MS + 20))):
            with pytest.raises(StorageUnavailable) as error:
                await store.load_due(3, NOW_MS, 100, after, skip)
            assert "127.0.0.1:1" in error.value.message and "s3cret" not in error.value.message
    finally:
        await store.close()


async def test_a_load_cancelled_while_it_waits_for_its_answer_leaves_no_connection_behind(
    store: SQLAlchemyTaskStore, mysql_url: str
) -> None:
    # Given a task, and another session holding the shard's table locked: the load waits for the lock
    task = await store.insert_task(make_task(shard=SHARD, next_run_at_ms=NOW_MS))
    parsed = make_url(mysql_url)
    locker = pymysql.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        autocommit=True,
    )
    table = store.layout.shards[SHARD].tasks_sql
    try:
        with locker.cursor() as cursor:
            cursor.execute(f"LOCK TABLES {table} WRITE")
        load = asyncio.ensure_future(store.load_due(SHARD, NOW_MS + 1_000, 100))
        for _ in range(100):
            with locker.cursor() as cursor:
                cursor.execute(  # this table's: other tests (other xdist workers) use the same server
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST"
                    " WHERE STATE = 'Waiting for table metadata lock' AND INFO LIKE %s",
                    (f"%{table}%",),
                )
                (waiting,) = cursor.fetchone() or (0,)
            if waiting:
                break
            await asyncio.sleep(0.05)
        assert waiting, "the load waits for the table lock"

        # When the load is cancelled there (the runner cancels the loads of a paused shard) and the lock freed
        load.cancel()
        with pytest.raises(asyncio.CancelledError):
            await load
    finally:
        with locker.cursor() as cursor:
            cursor.execute("UNLOCK TABLES")
        locker.close()

    # Then the pool's one connection answers the next calls with their own answers, not the load's
    assert await store.get_task(task.id) == task
    [due] = await store.load_due(SHARD, NOW_MS + 1_000, 100)
    assert due.task_id == task.id
