"""TaskStore.edit_task, count_rows and count_dead_letters, proven on every backend: memory, SQLite, MariaDB
(the task counts: test_store_task_counts_contract.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sharding import shard_of_task_id
from tests.contract.backends import NOW_MS, intent_of, interval_planner, make_task
from tjobs.errors import NotFound, VersionConflict
from tjobs.model import Flow, FlowKind, FlowStatus, TaskStatus
from tjobs.stores.base import TaskStore


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
