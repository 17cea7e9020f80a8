"""Indexing the children of tasks registered before migration 0024 (``tjobs index-children``,
:mod:`tjobs.service.child_index`) on the SQL stores: a task whose ``children`` were written without their
reverse-index rows gets them; every shard is walked in slices, resumably, and a second walk changes
nothing. The memory twin has no tasks from before the index (it starts empty): not a backend here."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.contract.backends import make_task
from tjobs.model import Task, TaskChildren
from tjobs.service.child_index import IndexPosition, index_children
from tjobs.stores.base import TaskStore
from tjobs.stores.sql.task_parents import SqlTaskParents
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.asyncio


async def _unindexed(store: TaskStore) -> tuple[list[Task], Task, Task, list[Task]]:
    """Two children, a parent naming both in shards 1, 6 and 14 (three parents), and tasks naming none, all
    stored as a node before migration 0024 left them: ``children`` set, no rows in ``task_parents``."""
    a, b = [await store.insert_task(make_task(shard=shard)) for shard in (3, 9)]
    parents = []
    for shard, children in (
        (1, TaskChildren((a.id, b.id))),
        (6, TaskChildren((a.id,), (b.id,))),
        (14, TaskChildren((), (a.id,))),
    ):
        parents.append(await store.insert_task(replace(make_task(shard=shard), children=children)))
    others = [await store.insert_task(make_task(shard=shard)) for shard in (1, 1, 6, 14, 15)]
    return parents, a, b, others


def _sql(store: TaskStore) -> tuple[SQLAlchemyTaskStore, SqlTaskParents]:
    if not isinstance(store, SQLAlchemyTaskStore):
        pytest.skip("the memory twin holds no tasks from before the index")
    return store, SqlTaskParents(store)


async def test_the_children_set_before_the_index_are_indexed_by_a_walk_in_slices(store: TaskStore) -> None:
    sql, parents = _sql(store)
    (p1, p6, p14), a, b, others = await _unindexed(store)
    assert await parents.parents_of([a.id, b.id]) == {}

    # When every shard is walked, two tasks a read
    seen: list[IndexPosition] = []
    end = await index_children(parents, sql.topology.shard_count, batch=2, tasks_per_s=10_000, progress=seen.append)

    # Then each child has its parents by relation, every shard was walked in order, each task read once
    assert await parents.parents_of([a.id, b.id]) == {
        a.id: TaskChildren((p1.id, p6.id), (p14.id,)),
        b.id: TaskChildren((p1.id,), (p6.id,)),
    }
    assert end == IndexPosition(sql.topology.shard_count, 0, 5)
    assert [p.shard for p in seen] == sorted(p.shard for p in seen)
    assert seen[-1].shard == sql.topology.shard_count
    assert [p.after_id for p in seen if p.shard == 1 and p.after_id] == [others[0].id, others[1].id]  # 2, then 1

    # And a second walk writes nothing new: the same links
    again = await index_children(parents, sql.topology.shard_count, batch=1000, tasks_per_s=10_000)
    assert again.links == 5
    assert (await parents.parents_of([a.id]))[a.id] == TaskChildren((p1.id, p6.id), (p14.id,))


async def test_a_walk_resumes_from_the_position_it_printed(store: TaskStore) -> None:
    sql, parents = _sql(store)
    (_, p6, p14), a, b, _ = await _unindexed(store)

    # When a walk starts where an interrupted one stopped (after shard 6's parent)
    end = await index_children(parents, sql.topology.shard_count, start=IndexPosition(6, p6.id), tasks_per_s=10_000)

    # Then only the tasks after that position are indexed
    assert end.links == 1
    assert await parents.parents_of([a.id, b.id]) == {a.id: TaskChildren((), (p14.id,))}


async def test_a_walk_refuses_a_batch_or_pace_out_of_bounds(store: TaskStore) -> None:
    sql, parents = _sql(store)
    for bad in ({"batch": 0}, {"batch": 10_001}, {"tasks_per_s": 0.0}):
        with pytest.raises(ValueError):
            await index_children(parents, sql.topology.shard_count, **bad)
