"""The reverse index of child tasks (:class:`tjobs.stores.contracts.task_parents.TaskParentRecords`) on
every backend: a parent's links are added (those there already kept), read back per child by relation in
id order, and forgotten when the parent is deleted."""

from __future__ import annotations

import secrets

import pytest

from tjobs.model import TaskChildren
from tjobs.stores.base import TaskStore
from tjobs.stores.task_parent_store import task_parents_of

pytestmark = pytest.mark.asyncio


def _ids(count: int) -> list[int]:
    """Task ids no other test uses (the table is not wiped between tests)."""
    base = secrets.randbelow(2**40) * 1_000
    return [base + k for k in range(1, count + 1)]


async def test_a_childs_parents_are_read_back_by_relation_in_id_order(store: TaskStore) -> None:
    # Given three parents naming two children, one of them in both relations, and a link written twice
    parents = task_parents_of(store)
    c1, c2, p1, p2, p3 = _ids(5)
    await parents.link_children("app-a", p3, TaskChildren((c1,), (c2,)))
    await parents.link_children("app-a", p1, TaskChildren((c1, c2), (c1,)))
    await parents.link_children("app-a", p2, TaskChildren((c1,)))
    await parents.link_children("app-a", p2, TaskChildren((c1,)))  # an edit naming it again

    # When the children's parents are read
    found = await parents.parents_of([c1, c2, p1])

    # Then each child has its parents per relation, and a task naming no one as a child is absent
    assert found == {c1: TaskChildren((p1, p2, p3), (p1,)), c2: TaskChildren((p1,), (p3,))}
    assert await parents.parents_of([]) == {}


async def test_a_deleted_parents_links_are_forgotten_and_the_others_kept(store: TaskStore) -> None:
    parents = task_parents_of(store)
    child, gone, kept = _ids(3)
    await parents.link_children("app-a", gone, TaskChildren((child,), (child,)))
    await parents.link_children("app-a", kept, TaskChildren((), (child,)))

    await parents.unlink_parent(gone)
    await parents.unlink_parent(gone)  # again: nothing

    assert await parents.parents_of([child]) == {child: TaskChildren((), (kept,))}
