"""TaskStore.count_by_app and TaskStore.edit_task, proven on every backend: memory, SQLite, MariaDB."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import replace

import pymysql
import pytest
from sqlalchemy.engine import make_url

from sharding import shard_of_task_id
from tests.contract.backends import NOW_MS, intent_of, interval_planner, make_task
from tjobs.errors import NotFound, VersionConflict
from tjobs.model import Flow, FlowKind, FlowStatus, TaskStatus
from tjobs.stores.base import DEAD_LETTERS, TaskStore
from tjobs.stores.memory import MemoryTaskStore
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore


async def test_count_by_app_counts_every_app_per_status_and_dead_letters_in_one_database(
    store: TaskStore,
) -> None:
    tables = store.topology.tables_per_database
    first, second = 0, tables  # the first shards of databases 0 and 1
    for shard, status in (
        (first, TaskStatus.ACTIVE),
        (first + 1, TaskStatus.ACTIVE),
        (first + 2, TaskStatus.PAUSED),
        (second, TaskStatus.ACTIVE),
    ):
        await store.insert_task(make_task(shard=shard, status=status))
    other = await store.insert_task(make_task(shard=first + 3, app_id="app-b"))
    for at, flow_status in (
        (NOW_MS, FlowStatus.DEAD),
        (NOW_MS + 1, FlowStatus.DEAD),
        (NOW_MS + 2, FlowStatus.DELIVERED),
    ):
        await store.insert_manual_flow(
            other.id, Flow(other.id, at, "app-b", FlowKind.MANUAL, flow_status, 1, None, NOW_MS, NOW_MS)
        )

    assert (await store.count_by_app(0)).counts == {
        "app-a": {"active": 2, "paused": 1},
        "app-b": {"active": 1, DEAD_LETTERS: 2},
    }
    assert (await store.count_by_app(1)).counts == {"app-a": {"active": 1}}


async def test_count_by_app_reads_the_status_of_the_tasks_asked_after_the_counts(store: TaskStore) -> None:
    tables = store.topology.tables_per_database
    paused = await store.insert_task(make_task(shard=1, status=TaskStatus.PAUSED))
    elsewhere = await store.insert_task(make_task(shard=tables))  # database 1
    absent = make_task(shard=2).id  # never stored
    asked: list[int] = []

    def then_ask() -> list[int]:
        asked.append(1)
        return [paused.id, elsewhere.id, absent]

    read = await store.count_by_app(0, then_ask)
    assert asked == [1]  # asked once
    assert read.statuses == {paused.id: "paused", absent: None}  # the other database's task left out
    assert read.counts == {"app-a": {"paused": 1}}


async def test_an_edit_keeps_a_fire_that_committed_since_the_read(store: TaskStore) -> None:
    task = await store.insert_task(make_task(shard=5))
    read = await store.get_task(task.id)
    assert read is not None
    [outcome] = await store.commit_fires([intent_of(task)], NOW_MS, interval_planner)
    assert outcome.task is not None  # a fire between the read and the edit

    paused = await store.edit_task(
        replace(read, status=TaskStatus.PAUSED, updated_at_ms=NOW_MS + 9), {"status"}, from_status=TaskStatus.ACTIVE
    )
    assert (paused.status, paused.fire_count, paused.next_run_at_ms) == (
        TaskStatus.PAUSED,
        1,
        outcome.task.next_run_at_ms,
    )
    assert (paused.version, paused.revision, paused.updated_at_ms) == (3, 2, NOW_MS + 9)
    assert await store.get_task(task.id) == paused
    assert shard_of_task_id(paused.id) == 5

    again = await store.edit_task(replace(read, status=TaskStatus.PAUSED), {"status"}, from_status=TaskStatus.ACTIVE)
    assert again == paused  # not active any more: unchanged

    renamed = await store.edit_task(replace(read, name="renamed"), {"name"}, expected_revision=2)
    assert (renamed.name, renamed.status, renamed.revision) == ("renamed", TaskStatus.PAUSED, 3)
    with pytest.raises(VersionConflict) as conflict:
        await store.edit_task(replace(read, name="stale"), {"name"}, expected_revision=2)
    assert (conflict.value.expected, conflict.value.actual) == (2, 3)
    with pytest.raises(NotFound):
        await store.edit_task(replace(read, id=make_task(shard=5).id), {"name"})


async def test_count_rows_counts_the_tasks_and_flows_of_one_logical_database(store: TaskStore) -> None:
    tables = store.topology.tables_per_database
    fired = make_task(shard=tables)  # database 1
    await store.insert_task(fired)
    await store.insert_task(make_task(shard=tables + 1))
    await store.insert_task(make_task(shard=0))
    await store.commit_fires([intent_of(fired)], NOW_MS, interval_planner)

    assert await store.count_rows(1) == {"tasks": 2, "flows": 1}
    assert await store.count_rows(0) == {"tasks": 1, "flows": 0}


async def test_count_dead_letters_counts_the_asked_apps_dead_flows_of_one_database_now(store: TaskStore) -> None:
    tables = store.topology.tables_per_database
    tasks = {
        ("app-a", 0): await store.insert_task(make_task(shard=0, app_id="app-a")),
        ("app-a", 1): await store.insert_task(make_task(shard=1, app_id="app-a")),
        ("app-b", 2): await store.insert_task(make_task(shard=2, app_id="app-b")),
        ("app-a", tables): await store.insert_task(make_task(shard=tables, app_id="app-a")),  # database 1
    }
    for (app_id, _), task in tasks.items():
        for at, flow_status in ((NOW_MS, FlowStatus.DEAD), (NOW_MS + 1, FlowStatus.DELIVERED)):
            await store.insert_manual_flow(
                task.id, Flow(task.id, at, app_id, FlowKind.MANUAL, flow_status, 1, None, NOW_MS, NOW_MS)
            )

    assert await store.count_dead_letters(0, ["app-a", "app-b", "app-c"]) == {"app-a": 2, "app-b": 1, "app-c": 0}
    assert await store.count_dead_letters(1, ["app-a"]) == {"app-a": 1}
    assert await store.count_dead_letters(0, []) == {}


def _pause_from_another_session(store: TaskStore, task_id: int, shard: int) -> None:
    """Commit a pause of the task on a connection of its own, now (a sync driver: called from then_ask)."""
    if isinstance(store, MemoryTaskStore):
        tasks = store._tasks[shard]
        tasks[task_id] = replace(tasks[task_id], status=TaskStatus.PAUSED)
        return
    assert isinstance(store, SQLAlchemyTaskStore)
    home = store.layout.shards[shard]
    url = make_url(home.database.engine_url)
    if url.drivername.startswith("sqlite"):
        with closing(sqlite3.connect(url.database or "")) as lite, lite:
            lite.execute(f"UPDATE {home.tasks_sql} SET status = 'paused' WHERE id = ?", (task_id,))
        return
    maria = pymysql.connect(host=url.host, port=url.port or 3306, user=url.username, password=url.password or "")
    with closing(maria):
        with maria.cursor() as cursor:
            cursor.execute(f"UPDATE {home.tasks_sql} SET status = 'paused' WHERE id = %s", (task_id,))
        maria.commit()


async def test_count_by_app_reads_the_asked_statuses_in_the_counts_own_snapshot(store: TaskStore) -> None:
    """A pause another session commits between the counting statement and the status read is seen by
    neither: both read the snapshot the counts took (what lets the task counts tell which of a node's
    own changes the counts saw, tjobs.service.task_counts)."""
    task = await store.insert_task(make_task(shard=1))

    def then_ask() -> list[int]:
        _pause_from_another_session(store, task.id, 1)
        return [task.id]

    read = await store.count_by_app(0, then_ask)
    assert read.counts == {"app-a": {"active": 1}} and read.statuses == {task.id: "active"}
    stored = await store.get_task(task.id)
    assert stored is not None and stored.status is TaskStatus.PAUSED  # committed meanwhile
