"""A task's children (README "Child tasks") on every backend: stored with the task at create (one or a
batch), read back by every read of it, the fire transaction and the listing included, replaced by an
owner's edit naming ``children`` only, and left alone by any other edit."""

from __future__ import annotations

from dataclasses import replace

from tests.contract.backends import NOW_MS, intent_of, make_task
from tjobs.firing.planner import FirePlanner, FirePolicy
from tjobs.model import TaskChildren
from tjobs.stores.base import TaskStore

PLANNER = FirePlanner(FirePolicy(misfire_threshold_ms=60_000, catch_up_max=10, max_age_ms=3_600_000, timeout_ms=2_000))
CHILDREN = TaskChildren((11, 12), (13,))


async def test_a_tasks_children_are_stored_with_it_and_read_back_everywhere(store: TaskStore) -> None:
    shard = 5
    task = await store.insert_task(replace(make_task(shard=shard), children=CHILDREN))
    [batched, plain] = await store.insert_tasks([replace(make_task(shard=shard), children=CHILDREN), make_task()])
    assert not isinstance(batched, (int, Exception)) and not isinstance(plain, (int, Exception))

    [outcome] = await store.commit_fires([intent_of(task)], NOW_MS, PLANNER)
    read = await store.get_task(task.id)
    listed = await store.list_tasks(task.app_id, shard, None, 100)

    assert task.children == CHILDREN and outcome.task is not None and outcome.task.children == CHILDREN
    assert read is not None and read.children == CHILDREN
    assert {t.id: t.children for t in listed if t.id in (task.id, batched.id)} == {
        task.id: CHILDREN,
        batched.id: CHILDREN,
    }
    got_batched, got_plain = await store.get_task(batched.id), await store.get_task(plain.id)
    assert got_batched is not None and got_batched.children == CHILDREN
    assert got_plain is not None and got_plain.children is None


async def test_only_an_edit_naming_children_changes_them(store: TaskStore) -> None:
    task = await store.insert_task(replace(make_task(shard=3), children=CHILDREN))

    renamed = await store.edit_task(replace(task, name="renamed", children=None), {"name"})
    changed = await store.edit_task(replace(renamed, children=TaskChildren((), (21,))), {"children"})
    cleared = await store.edit_task(replace(changed, children=None), {"children"})

    assert renamed.children == CHILDREN
    assert changed.children == TaskChildren((), (21,))
    read = await store.get_task(task.id)
    assert cleared.children is None and read is not None and read.children is None
