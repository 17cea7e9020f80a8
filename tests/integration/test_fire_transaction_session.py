"""The session a MariaDB fire transaction runs on, on the raw asyncmy fire pool and on SQLAlchemy's engine
(the fallback of a server URL without a direct pool): the same settings, the same errors, nothing left open.

Each test runs on both paths (``path``: ``direct``, or ``engine`` with the store's fire pools removed).
Another session holds a task row ``FOR UPDATE`` so the fire transaction waits inside ``SELECT … FOR
UPDATE``; while it waits, ``information_schema.INNODB_TRX`` shows its session: its isolation level, and
its id, which the session fence must know (``fire_sessions``, invariant 6, docs/design.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pymysql
import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url

from testkit.mariadb_template import fresh_mariadb, release_mariadb
from tests.contract.backends import NOW_MS, intent_of, interval_planner, make_task, mariadb_settings
from tjobs.errors import StorageUnavailable
from tjobs.model import FlowStatus, FlowUpdate
from tjobs.stores.sql_layout import ROW_LOCK_WAIT_S, mysql_errno
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

# MariaDB refreshes information_schema.INNODB_TRX (and INNODB_LOCK_WAITS) only when nobody read it for
# 0.1 s: two modules polling it at once on the shared server, on two workers, kept each other's reads on a
# stale copy, and the session test saw no lock wait for 5 s (two clean-clone runs). One worker runs both.
pytestmark = [pytest.mark.mariadb, pytest.mark.xdist_group("innodb_trx")]

LOCK_WAIT_TIMEOUT_ERRNO = 1205


@pytest.fixture(params=["direct", "engine"])
async def store(request: pytest.FixtureRequest, mysql_url: str) -> AsyncIterator[SQLAlchemyTaskStore]:
    settings = await fresh_mariadb(mariadb_settings(mysql_url))  # as migrated, in ~0.1 s
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    if request.param == "engine":
        getattr(store, "_fire_pools", {}).clear()  # as for a URL with options sql_direct does not translate
    else:
        assert store._fire_pools, "a plain MariaDB URL gets a fire pool"
    try:
        yield store
    finally:
        await store.close()
        release_mariadb(settings)


class Sessions:
    """Two pymysql sessions of the test: one holding a row lock, one looking at the server."""

    def __init__(self, mysql_url: str) -> None:
        parsed = make_url(mysql_url)

        def connect(autocommit: bool) -> pymysql.Connection:
            return pymysql.connect(
                host=parsed.host or "127.0.0.1",
                port=parsed.port or 3306,
                user=parsed.username or "root",
                password=parsed.password or "",
                autocommit=autocommit,
            )

        self.holder = connect(autocommit=False)
        self.monitor = connect(autocommit=True)
        self.holder_id = self._one(self.holder, "SELECT CONNECTION_ID()")[0]

    @staticmethod
    def _one(conn: pymysql.Connection, sql: str, params: Any = None) -> tuple[Any, ...]:
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        assert row is not None
        return tuple(row)

    def lock(self, table_sql: str, task_id: int) -> None:
        with self.holder.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute(f"SELECT id FROM {table_sql} WHERE id = %s FOR UPDATE", (task_id,))

    def release(self) -> None:
        self.holder.rollback()

    def waiting(self) -> list[tuple[int, str]]:
        """(session id, isolation level) of the transactions waiting for a lock the holder holds. Not every
        lock wait on the server: other tests (other xdist workers) write to the same server at the same time."""
        with self.monitor.cursor() as cursor:
            cursor.execute(
                "SELECT waiting.trx_mysql_thread_id, waiting.trx_isolation_level "
                "FROM information_schema.INNODB_LOCK_WAITS w "
                "JOIN information_schema.INNODB_TRX waiting ON waiting.trx_id = w.requesting_trx_id "
                "JOIN information_schema.INNODB_TRX holding ON holding.trx_id = w.blocking_trx_id "
                "WHERE holding.trx_mysql_thread_id = %s",
                (self.holder_id,),
            )
            return [(int(row[0]), str(row[1])) for row in cursor.fetchall()]

    def open_transactions(self, session_ids: list[int]) -> list[int]:
        """Those of ``session_ids`` with a transaction open on the server."""
        if not session_ids:
            return []
        with self.monitor.cursor() as cursor:
            marks = ", ".join(["%s"] * len(session_ids))
            cursor.execute(
                f"SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id IN ({marks})",
                session_ids,
            )
            return [int(row[0]) for row in cursor.fetchall()]

    def lock_free(self, table_sql: str, task_id: int) -> bool:
        """Whether the row can be locked at once (``NOWAIT``); the lock is let go again."""
        with self.monitor.cursor() as cursor:
            cursor.execute("BEGIN")
            try:
                cursor.execute(f"SELECT id FROM {table_sql} WHERE id = %s FOR UPDATE NOWAIT", (task_id,))
                return True
            except pymysql.err.OperationalError:
                return False
            finally:
                cursor.execute("ROLLBACK")

    def close(self) -> None:
        self.holder.close()
        self.monitor.close()


@pytest.fixture
async def sessions(mysql_url: str) -> AsyncIterator[Sessions]:
    opened = await asyncio.to_thread(Sessions, mysql_url)
    try:
        yield opened
    finally:
        await asyncio.to_thread(opened.close)


async def eventually(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not (value := await asyncio.to_thread(condition)):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what} (last: {value!r})")
        await asyncio.sleep(0.15)  # INNODB_TRX is refreshed only once unread for 0.1 s
    return value


def fire_session_ids(store: SQLAlchemyTaskStore) -> list[int]:
    return [i for recorded in store.fire_sessions().values() for i in recorded.ids]


async def test_a_fire_transaction_waits_for_a_row_lock_at_most_the_lock_wait_timeout_in_read_committed(
    store: SQLAlchemyTaskStore, sessions: Sessions
) -> None:
    # Given a due task whose row another session holds locked
    task = await store.insert_task(make_task(shard=3))
    table = store.layout.shards[3].tasks_sql
    await asyncio.to_thread(sessions.lock, table, task.id)

    # When it fires
    loop = asyncio.get_running_loop()
    started = loop.time()
    fire = asyncio.ensure_future(store.commit_fires([intent_of(task)], NOW_MS, interval_planner))

    # Then its transaction waits in READ COMMITTED, on a session the session fence knows
    [(session, isolation)] = await eventually(sessions.waiting, 5.0, "the fire transaction waits for the lock")
    assert isolation == "READ COMMITTED"
    assert session in fire_session_ids(store)

    # And it gives up after innodb_lock_wait_timeout (the engine's ROW_LOCK_WAIT_S, not the server's 50 s)
    # with the server's error 1205 (its intents are retried later), having written nothing
    with pytest.raises(Exception) as error:
        await asyncio.wait_for(fire, ROW_LOCK_WAIT_S + 10)
    assert mysql_errno(error.value) == LOCK_WAIT_TIMEOUT_ERRNO
    assert loop.time() - started >= ROW_LOCK_WAIT_S - 0.5
    assert await store.get_task(task.id) == task and await store.list_flows(task.id, 10) == []

    # And once the lock goes, the same intent commits
    await asyncio.to_thread(sessions.release)
    [outcome] = await store.commit_fires([intent_of(task)], NOW_MS, interval_planner)
    assert outcome.committed


async def test_a_cancelled_fire_transaction_leaves_no_transaction_open_and_no_lock_held(
    store: SQLAlchemyTaskStore, sessions: Sessions
) -> None:
    # Given a fire transaction holding one task's row lock while it waits for another's
    held, free = await store.insert_task(make_task(shard=3)), await store.insert_task(make_task(shard=3))
    table = store.layout.shards[3].tasks_sql
    await asyncio.to_thread(sessions.lock, table, max(held.id, free.id))  # locked in id order: the second
    fire = asyncio.ensure_future(store.commit_fires([intent_of(held), intent_of(free)], NOW_MS, interval_planner))
    [(session, _)] = await eventually(sessions.waiting, 5.0, "the fire transaction waits for the lock")

    # When the caller stops waiting for it (a node stopping) and the other session lets go
    fire.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fire
    await asyncio.to_thread(sessions.release)

    # Then no session of the store keeps a transaction open, and both rows can be locked at once
    await eventually(
        lambda: not sessions.open_transactions([session, *fire_session_ids(store)]), 5.0, "no transaction left open"
    )
    assert await asyncio.to_thread(sessions.lock_free, table, min(held.id, free.id))
    assert await store.list_flows(held.id, 10) == [] and await store.list_flows(free.id, 10) == []

    # And the pool's next fire transactions commit
    outcomes = await store.commit_fires([intent_of(held), intent_of(free)], NOW_MS, interval_planner)
    assert [o.committed for o in outcomes] == [True, True]


async def test_a_fire_transaction_whose_session_a_new_owner_ends_is_unavailable_and_the_next_one_commits(
    store: SQLAlchemyTaskStore, sessions: Sessions
) -> None:
    # Given a fire transaction waiting for a row lock, and another node's store
    task = await store.insert_task(make_task(shard=5))
    table = store.layout.shards[5].tasks_sql
    new_owner = SQLAlchemyTaskStore(store.settings)
    await new_owner.start()
    await new_owner.get_task(task.id)  # its pools are open: it ends sessions at once
    await asyncio.to_thread(sessions.lock, table, task.id)
    fire = asyncio.ensure_future(store.commit_fires([intent_of(task)], NOW_MS, interval_planner))
    try:
        [(session, _)] = await eventually(sessions.waiting, 5.0, "the fire transaction waits for the lock")

        # When that node ends this node's recorded sessions (the session fence of a new owner, with
        # what fire_sessions published)
        [(server, recorded)] = store.fire_sessions().items()
        assert session in recorded.ids
        assert await new_owner.end_sessions(server, recorded) >= 1
    finally:
        await new_owner.close()

    # Then the transaction fails as an unreachable server and wrote nothing
    with pytest.raises(StorageUnavailable):
        await asyncio.wait_for(fire, ROW_LOCK_WAIT_S + 10)
    await asyncio.to_thread(sessions.release)
    assert await store.list_flows(task.id, 10) == []

    # And the next fire transactions commit on live connections
    for _ in range(3):
        [outcome] = await store.commit_fires([intent_of(task)], NOW_MS, interval_planner)
        if outcome.committed:
            break
    assert outcome.committed and len(await store.list_flows(task.id, 10)) == 1
    await eventually(lambda: session not in fire_session_ids(store), 5.0, "the ended session is forgotten")


@pytest.mark.parametrize("store", ["direct"], indirect=True)  # the engine path goes through the engine
async def test_on_a_server_with_a_fire_pool_fires_and_outcomes_do_not_go_through_the_engine(
    store: SQLAlchemyTaskStore,
) -> None:
    checkouts: list[int] = []
    for engine in {*store._engines.values(), *store._writers.values()}:
        event.listen(engine.sync_engine.pool, "checkout", lambda *_: checkouts.append(1))
    tasks = [await store.insert_task(make_task(shard=shard)) for shard in (1, 6, 11)]

    outcomes = await store.commit_fires([intent_of(t) for t in tasks], NOW_MS, interval_planner)
    assert all(o.committed for o in outcomes)
    updates = [FlowUpdate(t.id, NOW_MS, FlowStatus.DELIVERED, 1, None, 204) for t in tasks]
    await store.record_flow_updates(updates, NOW_MS + 5)

    assert checkouts == []
    for task in tasks:
        [flow] = await store.list_flows(task.id, 10)
        assert flow.status is FlowStatus.DELIVERED and flow.attempts == 1 and flow.last_status_code == 204
