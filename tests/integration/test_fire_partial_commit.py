"""A fire batch over two MariaDB servers, one of which cannot commit: the job runner on real MariaDB.

The two servers are one MariaDB reached through two URLs (``127.0.0.1`` and ``localhost``): the store
opens one engine, so one fire transaction, per URL. A row lock held on server 1 by another session
(``SELECT … FOR UPDATE`` in an open transaction) stalls that server's transaction; the test then ends
the stalled session (``KILL``), as a lost connection would, unless its lock wait timed out first.
Server 0's fires must be delivered meanwhile, and nothing may be lost or fired twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
from collections.abc import AsyncIterator, Callable

import pymysql
import pytest
from sqlalchemy.engine import make_url

from sharding import TaskIdGenerator, Topology
from tests.contract.backends import drop_databases
from tjobs.clock import ManualClock
from tjobs.cluster.local import LocalCoordinator
from tjobs.firing.planner import FirePlanner, FirePolicy
from tjobs.firing.runner import JobRunner
from tjobs.model import DeliveryMode, Flow, MisfirePolicy, Task, TaskStatus
from tjobs.settings import SchedulerSettings, StorageSettings
from tjobs.specs import CallbackSpec, IntervalSpec
from tjobs.stores.migrate import migrate
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

# MariaDB refreshes information_schema.INNODB_TRX (and INNODB_LOCK_WAITS) only when nobody read it for
# 0.1 s: two modules polling it at once on the shared server, on two workers, kept each other's reads on a
# stale copy, and the session test saw no lock wait for 5 s (two clean-clone runs). One worker runs both.
pytestmark = [pytest.mark.mariadb, pytest.mark.xdist_group("innodb_trx")]

TOPOLOGY = "2x2x4"  # shards 0-7 on instance 0 (server 0), 8-15 on instance 1 (server 1)
T0 = 1_800_000_000_000 - 1_800_000_000_000 % 300_000
SECOND = 1000
HEALTHY_SHARDS, LOCKED_SHARD = (1, 5), 9
IDS = TaskIdGenerator(Topology.parse(TOPOLOGY).shard_count)
_ID_CLOCK = itertools.count(1)


def _other_address(url: str) -> str | None:
    parsed = make_url(url)
    swap = {"127.0.0.1": "localhost", "localhost": "127.0.0.1"}.get(parsed.host or "")
    return None if swap is None else parsed.set(host=swap).render_as_string(hide_password=False)


@pytest.fixture
async def two_servers(mysql_url: str) -> AsyncIterator[StorageSettings]:
    other = _other_address(mysql_url)
    if other is None:
        pytest.skip(f"no second address for {mysql_url}: use 127.0.0.1 or localhost")
    settings = StorageSettings(
        urls=[mysql_url, other], topology=TOPOLOGY, database_prefix=f"tjobspc_{secrets.token_hex(4)}"
    )
    await migrate(settings)
    try:
        yield settings
    finally:
        await drop_databases(settings)


class RowLock:
    """Another session holding one task row locked, and a monitor that can end the sessions it stalls."""

    def __init__(self, mysql_url: str, table_sql: str, task_id: int) -> None:
        parsed = make_url(mysql_url)

        def connect(autocommit: bool) -> pymysql.Connection:
            return pymysql.connect(
                host=parsed.host or "127.0.0.1",
                port=parsed.port or 3306,
                user=parsed.username or "root",
                password=parsed.password or "",
                autocommit=autocommit,
            )

        self.table_sql, self.task_id = table_sql, task_id
        self.holder = connect(autocommit=False)
        self.monitor = connect(autocommit=True)
        with self.holder.cursor() as cursor:
            cursor.execute("SELECT CONNECTION_ID()")
            row = cursor.fetchone()
        assert row is not None
        self.holder_id = int(row[0])

    def take(self) -> None:
        with self.holder.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute(f"SELECT id FROM {self.table_sql} WHERE id = %s FOR UPDATE", (self.task_id,))

    def stalled_sessions(self) -> list[int]:
        with self.monitor.cursor() as cursor:
            cursor.execute(
                "SELECT r.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w "
                "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
                "JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id "
                "WHERE b.trx_mysql_thread_id = %s",
                (self.holder_id,),
            )
            return [int(row[0]) for row in cursor.fetchall()]

    def kill(self, session_id: int) -> None:
        # (suppressed: the session is gone already, its lock wait timed out)
        with self.monitor.cursor() as cursor, contextlib.suppress(pymysql.err.OperationalError):
            cursor.execute(f"KILL {int(session_id)}")

    def release(self) -> None:
        self.holder.rollback()

    def close(self) -> None:
        self.holder.close()
        self.monitor.close()


def make_task(shard: int) -> Task:
    return Task(
        id=IDS.mint(shard, T0 - 60_000 + next(_ID_CLOCK)),
        app_id="app",
        name=f"s{shard}",
        key=None,
        schedule=IntervalSpec(SECOND, T0 + SECOND),
        callback=CallbackSpec(("https://receiver.example/hook",)),
        payload=None,
        misfire_policy=MisfirePolicy.FIRE_SOON,
        delivery=DeliveryMode.AT_LEAST_ONCE,
        status=TaskStatus.ACTIVE,
        next_run_at_ms=T0 + SECOND,
        version=1,
        fire_count=0,
        created_at_ms=T0 - 60_000,
        updated_at_ms=T0 - 60_000,
    )


async def eventually(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.01)


async def test_a_row_lock_on_one_server_neither_delays_nor_loses_the_other_servers_fires(
    mysql_url: str,
    two_servers: StorageSettings,
) -> None:
    store = SQLAlchemyTaskStore(two_servers)
    await store.start()
    clock = ManualClock(T0)
    sent: list[Flow] = []
    coordinator = LocalCoordinator(Topology.parse(TOPOLOGY).shard_count)
    runner = JobRunner(
        store,
        coordinator,
        FirePlanner(FirePolicy(60 * SECOND, 100)),
        lambda _t, flow: sent.append(flow),
        SchedulerSettings(tick_ms=10, cycle_s=300, load_lead_s=30),
        clock,
    )
    healthy = [make_task(shard) for shard in HEALTHY_SHARDS for _ in range(10)]
    locked, beside = make_task(LOCKED_SHARD), make_task(LOCKED_SHARD)
    await store.insert_tasks([*healthy, locked, beside])
    lock = RowLock(mysql_url, store.layout.shards[LOCKED_SHARD].tasks_sql, locked.id)
    await runner.start()
    await coordinator.start(runner.set_owned)
    try:
        # Given a row of server 1 locked by another session
        await asyncio.to_thread(lock.take)

        # When the instant T0 + 1 s comes due for every task
        clock.set(T0 + SECOND)

        # Then server 0's fires are delivered while server 1's transaction still waits for the lock
        healthy_ids = {t.id for t in healthy}
        await eventually(lambda: {f.task_id for f in sent} >= healthy_ids, 1.0, "server 0's fires delivered")
        # (its transaction may reach the locked row only after server 0's fires went out: on a loaded
        # machine it had not yet, and a single look found it neither waiting nor failed)
        stalled: list[int] = []

        async def waits_or_failed() -> bool:
            stalled[:] = await asyncio.to_thread(lock.stalled_sessions)
            return bool(stalled) or runner.stats.commit_errors >= 1

        deadline = asyncio.get_running_loop().time() + 5.0
        while not await waits_or_failed():
            assert asyncio.get_running_loop().time() < deadline, "server 1's transaction neither waits nor failed"
            await asyncio.sleep(0.15)  # INNODB_TRX is refreshed only once unread for 0.1 s
        assert not {f.task_id for f in sent} & {locked.id, beside.id}

        # When the stalled session ends (lost connection, or its lock wait timed out) and the lock goes
        for session in stalled:
            await asyncio.to_thread(lock.kill, session)
        await eventually(lambda: runner.stats.commit_errors >= 1, 10.0, "server 1's transaction failed")
        await asyncio.to_thread(lock.release)
        assert not {f.task_id for f in sent} & {locked.id, beside.id}

        # Then server 1's fires are retried alone and fire once, and every task keeps its cadence
        clock.set(T0 + SECOND + 600)
        await eventually(lambda: {f.task_id for f in sent} >= {locked.id, beside.id}, 5.0, "server 1 retried")
        clock.set(T0 + 2 * SECOND)
        await eventually(lambda: len(sent) == 2 * (len(healthy) + 2), 5.0, "every task fired T0 + 2 s")
        for task in [*healthy, locked, beside]:
            flows = await store.list_flows(task.id, 10)
            assert sorted(f.scheduled_at_ms - T0 for f in flows) == [1 * SECOND, 2 * SECOND], task.name
            assert sorted(f.scheduled_at_ms - T0 for f in sent if f.task_id == task.id) == [SECOND, 2 * SECOND]
        assert runner.stats.cas_rejected == 0
    finally:
        await runner.stop()
        await asyncio.to_thread(lock.close)
        await store.close()
