"""The task counts (TaskRecords.read_task_counts, reconcile_task_counts) on every backend: memory, SQLite,
MariaDB. After every kind of write the counts are exactly the tasks, with no read of the tasks; writers
racing each other or a reconciliation leave them exact; a reconciliation sets put-off counts right."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from tests.contract.backends import NOW_MS, intent_of, interval_planner, make_task
from tjobs.model import TaskStatus
from tjobs.stores import sql_fire, sql_task_counts
from tjobs.stores.base import TaskStore
from tjobs.stores.memory import MemoryTaskStore
from tjobs.stores.sql_layout import ShardTables
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

ACTIVE, PAUSED, COMPLETED = TaskStatus.ACTIVE, TaskStatus.PAUSED, TaskStatus.COMPLETED


async def counted(store: TaskStore) -> dict[str, dict[str, int]]:
    """Every app's counts over every database, as the counts hold them (zeros left out)."""
    total: dict[str, dict[str, int]] = {}
    for database in range(store.topology.database_count):
        for app_id, statuses in (await store.read_task_counts(database)).items():
            for status, n in statuses.items():
                of_app = total.setdefault(app_id, {})
                of_app[status] = of_app.get(status, 0) + n
    return {app: {s: n for s, n in of.items() if n} for app, of in total.items() if any(of.values())}


async def stored(store: TaskStore, apps: tuple[str, ...] = ("app-a", "app-b")) -> dict[str, dict[str, int]]:
    """The same, counted from the tasks themselves (the truth the counts must equal)."""
    truth: dict[str, dict[str, int]] = {}
    for app_id in apps:
        for status in TaskStatus:
            n = sum([await store.count_tasks(app_id, shard, status) for shard in range(store.topology.shard_count)])
            if n:
                truth.setdefault(app_id, {})[status.value] = n
    return truth


async def assert_exact(store: TaskStore, expected: dict[str, dict[str, int]] | None = None) -> None:
    truth = await stored(store)
    assert await counted(store) == truth
    if expected is not None:
        assert truth == expected


async def set_count(store: TaskStore, app_id: str, status: TaskStatus, shard: int, n: int) -> None:
    """Put a count off by hand (what a bug or a hand-made change of the tables would do)."""
    if isinstance(store, MemoryTaskStore):
        store.task_counts[(app_id, status.value, shard)] = n
        return
    assert isinstance(store, SQLAlchemyTaskStore)
    home = store.layout.shards[shard]
    async with store._write(home.database.engine_url) as conn:
        sql = (
            f"UPDATE {home.task_counts_sql} SET n = {int(n)} "
            f"WHERE app_id = '{app_id}' AND status = '{status.value}' AND table_index = {home.table_index}"
        )
        await conn.exec_driver_sql(sql)


async def test_the_counts_follow_every_kind_of_write(store: TaskStore) -> None:
    tables = store.topology.tables_per_database
    # creates, single and batch, over two databases
    a = await store.insert_task(make_task(shard=0))
    b = await store.insert_task(make_task(shard=1, status=PAUSED))
    batch = await store.insert_tasks([make_task(shard=s, app_id="app-b") for s in (0, 0, 2, tables, tables + 1)])
    await assert_exact(store, {"app-a": {"active": 1, "paused": 1}, "app-b": {"active": 5}})
    assert await store.read_task_counts(1) == {"app-b": {"active": 2}}
    assert await store.read_task_counts(0, ["app-a"]) == {"app-a": {"active": 1, "paused": 1}}

    # pause, resume, an edit that changes no status, a whole-row update that does
    paused = await store.edit_task(replace(a, status=PAUSED), {"status"}, from_status=ACTIVE)
    await assert_exact(store, {"app-a": {"paused": 2}, "app-b": {"active": 5}})
    await store.edit_task(replace(b, status=ACTIVE), {"status"}, from_status=PAUSED)
    await store.edit_task(replace(b, name="renamed"), {"name"})
    await assert_exact(store, {"app-a": {"active": 1, "paused": 1}, "app-b": {"active": 5}})
    await store.update_task(replace(paused, status=ACTIVE), paused.version)
    await assert_exact(store, {"app-a": {"active": 2}, "app-b": {"active": 5}})

    # fires: one that moves the next run only, one that completes its task (max_fires)
    last = await store.insert_task(make_task(shard=3, max_fires=1))
    await store.commit_fires([intent_of(batch[0])], NOW_MS, interval_planner)  # type: ignore[arg-type]
    await assert_exact(store, {"app-a": {"active": 3}, "app-b": {"active": 5}})
    [outcome] = await store.commit_fires([intent_of(last)], NOW_MS, interval_planner)
    assert outcome.task is not None and outcome.task.status is COMPLETED
    await assert_exact(store, {"app-a": {"active": 2, "completed": 1}, "app-b": {"active": 5}})

    # deletes: one, one cancelling its flows, an app's in a shard, a purge of completed tasks
    assert await store.delete_task(a.id)
    assert not await store.delete_task(a.id)  # gone: nothing counted twice
    assert await store.delete_task_cancelling_flows(b.id, NOW_MS)
    assert await store.delete_app_tasks("app-b", 0, 10, NOW_MS) == 2
    await assert_exact(store, {"app-a": {"completed": 1}, "app-b": {"active": 3}})
    assert await store.purge(3, NOW_MS + 10**9, 100) >= 1
    await assert_exact(store, {"app-b": {"active": 3}})


def watch_count_writes(store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the fire transaction sends from now on: its SQL statements (every executor call), or on the
    twin each change of its counts."""
    sent: list[str] = []
    if isinstance(store, MemoryTaskStore):
        count = store._count

        def counted(shard: int, app_id: str, before: TaskStatus | None, after: TaskStatus | None) -> None:
            if before is not after:
                sent.append("task_counts")
            count(shard, app_id, before, after)

        monkeypatch.setattr(store, "_count", counted)
        return sent
    for executor in (sql_fire._Executor, sql_fire._AsyncmyExecutor):
        for name in ("rows", "count", "count_many", "counts"):
            original = executor.__dict__.get(name)
            if original is None:
                continue

            async def recorded(self: Any, sql: str, params: Any, _original: Any = original) -> Any:
                sent.append(sql)
                return await _original(self, sql, params)

            monkeypatch.setattr(executor, name, recorded)
    return sent


async def test_a_fire_that_only_moves_the_next_run_sends_no_count_statement(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = await store.insert_task(make_task(shard=2))
    done = await store.insert_task(make_task(shard=3, max_fires=1))
    sent = watch_count_writes(store, monkeypatch)
    await store.commit_fires([intent_of(task)], NOW_MS, interval_planner)
    assert not [s for s in sent if "task_counts" in s]
    if not isinstance(store, MemoryTaskStore):
        assert sent  # the fire's own statements were watched
    sent.clear()
    await store.commit_fires([intent_of(done)], NOW_MS, interval_planner)
    assert len([s for s in sent if "task_counts" in s]) == 1  # the task completed: one upsert
    await assert_exact(store, {"app-a": {"active": 1, "completed": 1}})


async def test_concurrent_creates_deletes_and_fires_leave_the_counts_exact(store: TaskStore) -> None:
    tables = store.topology.tables_per_database
    shards = [0, 1, tables, tables + 1]
    first = [await store.insert_task(make_task(shard=shards[i % 4], max_fires=1 + i % 2)) for i in range(16)]

    async def create(i: int) -> None:
        await store.insert_task(make_task(shard=shards[i % 4], app_id="app-b"))

    async def batch(i: int) -> None:
        await store.insert_tasks([make_task(shard=shards[(i + j) % 4]) for j in range(5)])

    async def fire(i: int) -> None:
        await store.commit_fires([intent_of(first[i])], NOW_MS, interval_planner)

    async def delete(i: int) -> None:
        await store.delete_task_cancelling_flows(first[i].id, NOW_MS)

    async def pause(i: int) -> None:
        await store.edit_task(replace(first[i], status=PAUSED), {"status"}, from_status=ACTIVE)

    work: list[Awaitable[None]] = []
    for i in range(16):
        work += [create(i), fire(i)]
        work.append(delete(i) if i % 3 == 0 else pause(i))
        if i % 4 == 0:
            work.append(batch(i))
    await asyncio.gather(*work)
    await assert_exact(store)


async def test_a_reconciliation_sets_a_put_off_count_right_reading_one_table(store: TaskStore) -> None:
    tables = store.topology.tables_per_database
    for shard in (1, 1, 2, tables):
        await store.insert_task(make_task(shard=shard))
    await store.insert_task(make_task(shard=1, app_id="app-b", status=PAUSED))
    await set_count(store, "app-a", ACTIVE, 1, 7)  # 2 there
    await set_count(store, "app-b", PAUSED, 1, 0)  # 1 there
    assert (await counted(store))["app-a"] == {"active": 9}

    assert await store.reconcile_task_counts(2) == []  # another table: right already, left as it is
    found = await store.reconcile_task_counts(1)
    assert sorted((c.app_id, c.status, c.by) for c in found) == [("app-a", "active", -5), ("app-b", "paused", 1)]
    await assert_exact(store, {"app-a": {"active": 4}, "app-b": {"paused": 1}})
    assert await store.reconcile_task_counts(1) == []  # nothing more to set right


async def test_a_reconciliation_racing_writers_leaves_the_counts_exact(store: TaskStore) -> None:
    tables = store.topology.tables_per_database
    doomed = [await store.insert_task(make_task(shard=1)) for _ in range(6)]
    await set_count(store, "app-a", ACTIVE, 1, 100)

    async def creates() -> None:
        for _ in range(8):
            await store.insert_task(make_task(shard=1))

    async def deletes() -> None:
        for task in doomed:
            await store.delete_task(task.id)

    async def reconciles() -> None:
        for _ in range(3):
            await store.reconcile_task_counts(1)

    await asyncio.gather(creates(), deletes(), reconciles(), store.insert_tasks([make_task(shard=tables)]))
    await store.reconcile_task_counts(1)  # what the racing ones found off is set right once
    await assert_exact(store, {"app-a": {"active": 9}})


async def test_a_write_committed_between_the_snapshot_and_the_correction_is_counted_once(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.insert_task(make_task(shard=1))
    await set_count(store, "app-a", ACTIVE, 1, 5)  # 1 there
    between = make_task(shard=1)

    if isinstance(store, MemoryTaskStore):
        # the writer runs at the twin's yield between its snapshot and its correction
        writer = asyncio.ensure_future(store.insert_task(between))
        await asyncio.sleep(0)
        found = await store.reconcile_task_counts(1)
        await writer
    elif isinstance(store, SQLAlchemyTaskStore) and store.layout.dialect == "sqlite":
        # a reconciliation holds the file's write lock: the create waits for it (or it for the create)
        found, _ = await asyncio.gather(store.reconcile_task_counts(1), store.insert_task(between))
    else:
        read = sql_task_counts.read_table_counts

        async def then_a_create(conn: Any, home: ShardTables) -> sql_task_counts.TableCounts:
            seen = await read(conn, home)
            await store.insert_task(between)  # another connection: committed before the correction
            return seen

        monkeypatch.setattr("tjobs.stores.sql.tasks.read_table_counts", then_a_create)
        found = await store.reconcile_task_counts(1)
    assert [(c.status, c.by) for c in found] == [("active", -4)]
    await assert_exact(store, {"app-a": {"active": 2}})


async def test_of_two_reconciliations_of_one_table_at_once_one_corrects(store: TaskStore) -> None:
    await store.insert_task(make_task(shard=1))
    await set_count(store, "app-a", ACTIVE, 1, 6)
    runs: list[Callable[[], Awaitable[Any]]] = [lambda: store.reconcile_task_counts(1)] * 2
    results = await asyncio.gather(*(run() for run in runs))
    assert sorted(sum(c.by for c in found) for found in results) == [-5, 0]
    await assert_exact(store, {"app-a": {"active": 1}})
