"""Tasks and flows as owners see them (:class:`tjobs.stores.contracts.TaskRecords`), proven on every
backend: memory, SQLite, MariaDB. Creates, compare-and-set updates, keys, listing, manual flows,
re-drives, retention, counts; searches, specs and app deletion have suites of their own."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from sharding import shard_of_task_id
from tests.contract.backends import NOW_MS, make_task, manual_flow
from tjobs.errors import Conflict, DuplicateKey, NotFound, VersionConflict
from tjobs.model import FlowStatus, FlowUpdate, Task, TaskStatus
from tjobs.stores.base import TaskStore

# ---- tasks --------------------------------------------------------------------------------------


async def test_task_round_trips_and_updates_with_compare_and_set(store: TaskStore) -> None:
    task = make_task(key="order-1")
    assert await store.insert_task(task) == task
    assert await store.get_task(task.id) == task
    assert await store.find_task_by_key("app-a", "order-1") == task
    assert await store.find_task_by_key("app-b", "order-1") is None

    changed = replace(
        task,
        name="renamed",
        payload={"v": 2},
        next_run_at_ms=NOW_MS + 5,
        status=TaskStatus.PAUSED,
        updated_at_ms=NOW_MS + 1,
    )
    stored = await store.update_task(changed, expected_version=1)
    assert stored == replace(changed, version=2)
    assert await store.get_task(task.id) == stored

    with pytest.raises(VersionConflict) as conflict:
        await store.update_task(replace(changed, name="stale"), expected_version=1)
    assert (conflict.value.expected, conflict.value.actual) == (1, 2)
    assert (await store.get_task(task.id)) == stored

    assert await store.delete_task(task.id) is True
    assert await store.delete_task(task.id) is False
    assert await store.get_task(task.id) is None
    with pytest.raises(NotFound):
        await store.update_task(stored, expected_version=2)


async def test_update_never_changes_identity_fields(store: TaskStore) -> None:
    task = await store.insert_task(make_task(key="k"))
    stored = await store.update_task(replace(task, app_id="other", key="other", created_at_ms=1), 1)
    assert (stored.app_id, stored.key, stored.created_at_ms) == ("app-a", "k", NOW_MS)


async def test_task_id_collision_is_a_conflict_not_a_duplicate_key(store: TaskStore) -> None:
    task = await store.insert_task(make_task())
    with pytest.raises(Conflict) as error:
        await store.insert_task(replace(task, name="twin"))
    assert not isinstance(error.value, DuplicateKey)


async def test_insert_tasks_stores_an_item_whose_id_is_taken_under_another_id_of_its_shard(
    store: TaskStore,
) -> None:
    # Given a stored task, and a batch whose fourth item was minted the same id (spread over shards)
    holder = await store.insert_task(make_task(shard=5, name="holder"))
    batch = [make_task(shard=shard, name=f"n{shard}") for shard in (1, 9, 14)]
    twin = replace(holder, name="twin")
    batch += [twin, make_task(shard=2, name="after")]

    # When the batch is inserted
    results = await store.insert_tasks(batch)

    # Then every item is stored exactly once, the twin under a new id of the same shard
    assert all(isinstance(r, Task) for r in results)
    stored = [r for r in results if isinstance(r, Task)]
    assert [t.name for t in stored] == ["n1", "n9", "n14", "twin", "after"]
    assert stored[3].id != holder.id and shard_of_task_id(stored[3].id) == 5
    for task in stored:
        assert await store.get_task(task.id) == task
    assert await store.get_task(holder.id) == holder
    listed = [t.name for shard in range(16) for t in await store.list_tasks("app-a", shard, None, 100)]
    assert sorted(listed) == sorted(["holder", "n1", "n9", "n14", "twin", "after"])


async def test_concurrent_inserts_of_one_key_leave_exactly_one_row(store: TaskStore) -> None:
    # Given 20 callers racing to create the task with one idempotency key
    candidates = [make_task(key="order-42", name=f"n{i}") for i in range(20)]

    # When they all insert at once
    results = await asyncio.gather(*(store.insert_task(t) for t in candidates), return_exceptions=True)

    # Then one wins and every other one is told the winner's id
    winners = [r for r in results if isinstance(r, Task)]
    assert len(winners) == 1
    duplicates = [r for r in results if isinstance(r, DuplicateKey)]
    assert len(duplicates) == 19
    assert {d.existing_task_id for d in duplicates} == {winners[0].id}
    assert (await store.find_task_by_key("app-a", "order-42")) == winners[0]


async def test_tasks_without_a_key_never_collide(store: TaskStore) -> None:
    shard = 3
    tasks = [make_task(shard=shard, name=f"n{i}") for i in range(5)]
    for task in tasks:
        await store.insert_task(task)
    assert len(await store.list_tasks("app-a", shard, None, 100)) == 5


async def test_the_same_key_in_two_apps_is_two_tasks(store: TaskStore) -> None:
    a = await store.insert_task(make_task(app_id="app-a", key="shared"))
    b = await store.insert_task(make_task(app_id="app-b", key="shared"))
    assert a.id != b.id
    # keys compare exactly (the MariaDB collation is binary)
    c = await store.insert_task(make_task(app_id="app-a", key="SHARED"))
    assert c.id not in (a.id, b.id)


async def test_insert_tasks_reports_duplicates_per_item(store: TaskStore) -> None:
    existing = await store.insert_task(make_task(key="k0"))
    batch = [make_task(key=f"k{i}") for i in range(6)] + [make_task(), make_task(key="k3")]
    results = await store.insert_tasks(batch)
    assert results[0] == existing.id
    assert results[1:6] == batch[1:6]
    assert results[6] == batch[6]
    assert results[7] == batch[3].id
    for item in batch[1:7]:
        assert await store.get_task(item.id) == item
    assert await store.get_task(batch[7].id) is None


async def test_list_tasks_pages_by_id_within_one_shard_and_app(store: TaskStore) -> None:
    ids = [(await store.insert_task(make_task(shard=5))).id for _ in range(7)]
    await store.insert_task(make_task(shard=5, app_id="app-b"))
    page1 = await store.list_tasks("app-a", 5, None, 3)
    page2 = await store.list_tasks("app-a", 5, page1[-1].id, 3)
    page3 = await store.list_tasks("app-a", 5, page2[-1].id, 3)
    assert [t.id for t in page1 + page2 + page3] == ids
    assert await store.list_tasks("app-a", 6, None, 3) == []


# ---- flows --------------------------------------------------------------------------------------


async def test_manual_flows_are_unique_per_instant(store: TaskStore) -> None:
    task = await store.insert_task(make_task())
    flow = await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS + 7))
    assert await store.get_flow(task.id, NOW_MS + 7) == flow
    with pytest.raises(Conflict):
        await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS + 7))


async def test_list_flows_newest_first_with_a_cursor(store: TaskStore) -> None:
    task = await store.insert_task(make_task())
    for offset in (5, 1, 3, 2, 4):
        await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS + offset))
    page = await store.list_flows(task.id, 2)
    assert [f.scheduled_at_ms - NOW_MS for f in page] == [5, 4]
    rest = await store.list_flows(task.id, 10, before_scheduled_at_ms=page[-1].scheduled_at_ms)
    assert [f.scheduled_at_ms - NOW_MS for f in rest] == [3, 2, 1]


async def test_redrive_puts_only_a_dead_flow_back_to_pending(store: TaskStore) -> None:
    task = await store.insert_task(make_task())
    await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS + 1, FlowStatus.DEAD))
    await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS + 2, FlowStatus.DELIVERED))
    await store.record_flow_updates(
        [FlowUpdate(task.id, NOW_MS + 1, FlowStatus.DEAD, 4, None, 500, "x")], NOW_MS
    )  # terminal already: ignored, attempts stay 0

    redriven = await store.redrive_flow(task.id, NOW_MS + 1, NOW_MS + 99)

    assert redriven is not None
    assert (redriven.status, redriven.next_attempt_at_ms, redriven.updated_at_ms) == (
        FlowStatus.PENDING,
        NOW_MS + 99,
        NOW_MS + 99,
    )
    assert await store.get_flow(task.id, NOW_MS + 1) == redriven
    assert await store.redrive_flow(task.id, NOW_MS + 1, NOW_MS + 100) is None  # no longer dead
    assert await store.redrive_flow(task.id, NOW_MS + 2, NOW_MS + 100) is None  # delivered
    assert await store.redrive_flow(task.id, NOW_MS + 3, NOW_MS + 100) is None  # no such flow


# ---- retention ----------------------------------------------------------------------------------


async def test_purge_removes_only_old_terminal_flows_and_old_completed_tasks_in_batches(
    store: TaskStore,
) -> None:
    shard = 6
    cutoff = NOW_MS
    old_done = await store.insert_task(
        replace(make_task(shard=shard, status=TaskStatus.COMPLETED, next_run_at_ms=None), updated_at_ms=cutoff - 1)
    )
    fresh_done = await store.insert_task(
        make_task(shard=shard, status=TaskStatus.COMPLETED, next_run_at_ms=None, now_ms=cutoff + 1)
    )
    active = await store.insert_task(replace(make_task(shard=shard), updated_at_ms=cutoff - 10))
    for offset, status in (
        (-30, FlowStatus.DELIVERED),
        (-20, FlowStatus.DEAD),
        (-10, FlowStatus.SKIPPED),
        (-5, FlowStatus.PENDING),
        (-4, FlowStatus.SENDING),
        (5, FlowStatus.DELIVERED),
    ):
        await store.insert_manual_flow(active.id, manual_flow(active, cutoff + offset, status))

    removed = []
    while (count := await store.purge(shard, cutoff, 2)) > 0:
        assert count <= 2
        removed.append(count)
    assert sum(removed) == 4  # three old terminal flows and one old completed task

    assert await store.get_task(old_done.id) is None
    assert await store.get_task(fresh_done.id) is not None
    assert await store.get_task(active.id) is not None
    left = sorted((f.scheduled_at_ms - cutoff, f.status) for f in await store.list_flows(active.id, 10))
    assert left == [(-5, FlowStatus.PENDING), (-4, FlowStatus.SENDING), (5, FlowStatus.DELIVERED)]


# ---- counts -------------------------------------------------------------------------------------


async def test_count_tasks_per_app_shard_and_status(store: TaskStore) -> None:
    shard = 11
    for status in (TaskStatus.ACTIVE, TaskStatus.ACTIVE, TaskStatus.PAUSED):
        await store.insert_task(make_task(shard=shard, status=status))
    await store.insert_task(make_task(shard=shard, app_id="app-b"))
    assert await store.count_tasks("app-a", shard) == 3
    assert await store.count_tasks("app-a", shard, TaskStatus.ACTIVE) == 2
    assert await store.count_tasks("app-a", shard, TaskStatus.COMPLETED) == 0
    assert await store.count_tasks("app-b", shard) == 1
    assert await store.count_tasks("app-a", shard + 1) == 0
