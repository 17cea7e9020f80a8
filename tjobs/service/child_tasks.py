"""A task's ``children`` field (README "Child tasks"): its parsing, and the walk that refuses a cycle.

The request shape is ``{"on_success": [task id, ...], "on_failure": [task id, ...]}`` (ids as the API
writes them, strings of digits; either list may be left out; ``null`` or ``{}`` names none). A child is
a task of the same app, named once per list, never the task itself, at most :data:`MAX_CHILDREN` per
list. A cycle (the task reachable again through its children's children, either list) is refused at
registration and edit by :func:`check_no_cycle`, which reads the graph through the store one task at a
time, bounded by :data:`MAX_WALK` tasks. Two concurrent edits can still close a cycle; it never loops:
a child's flow has the parent's instant as its key, so reaching a task again at that instant finds its
flow there and triggers nothing (:mod:`tjobs.service.child_flows`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tjobs.errors import InvalidInput
from tjobs.model import TaskChildren

FIELD = "children"
RELATIONS = ("on_success", "on_failure")
MAX_CHILDREN = 16
MAX_WALK = 1000

ChildrenReader = Callable[[int], Awaitable[TaskChildren | None]]
"""The children of a stored task of the app (``None``: none, or no such task)."""


def parse_children(value: Any) -> TaskChildren | None:
    """The request's ``children`` (``None``: none); 422 naming the entry that is wrong."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInput(FIELD, 'must be an object {"on_success": [task ids], "on_failure": [task ids]}')
    unknown = set(value) - set(RELATIONS)
    if unknown:
        raise InvalidInput(f"{FIELD}.{sorted(unknown)[0]}", "unknown field", "unknown_field")
    lists = [_ids(f"{FIELD}.{relation}", value.get(relation)) for relation in RELATIONS]
    children = TaskChildren(*lists)
    return children if children else None


def _ids(field: str, value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidInput(field, "must be a list of task ids")
    if len(value) > MAX_CHILDREN:
        raise InvalidInput(field, f"names at most {MAX_CHILDREN} tasks", "too_many_children")
    ids: list[int] = []
    for index, item in enumerate(value):
        task_id = _task_id(item)
        if task_id is None:
            raise InvalidInput(f"{field}[{index}]", "must be a task id (a string of digits)")
        if task_id in ids:
            raise InvalidInput(f"{field}[{index}]", f"names task {task_id} twice", "duplicate_child")
        ids.append(task_id)
    return tuple(ids)


def _task_id(item: Any) -> int | None:
    if isinstance(item, str) and item.isascii() and item.isdigit() and len(item) <= 19:
        return int(item)
    if type(item) is int and item > 0:
        return item
    return None


def children_field(children: TaskChildren, task_id: int) -> str:
    """The field naming ``task_id`` among ``children`` (``children.on_success[0]``)."""
    for relation in RELATIONS:
        ids: tuple[int, ...] = getattr(children, relation)
        if task_id in ids:
            return f"{FIELD}.{relation}[{ids.index(task_id)}]"
    return FIELD


def check_not_self(task_id: int, children: TaskChildren | None) -> None:
    """422 naming the entry where a task names itself."""
    if children is not None and task_id in children.all:
        raise InvalidInput(children_field(children, task_id), "a task cannot be its own child", "self_child")


async def check_no_cycle(task_id: int, children: TaskChildren | None, read: ChildrenReader) -> None:
    """422 ``cycle`` naming the child through which ``task_id`` reaches itself again, with the path.

    Walks breadth-first from each child (both lists) through the stored tasks' children; more than
    :data:`MAX_WALK` tasks reached is refused too (``too_deep``), as a graph this walk cannot vouch for.
    """
    if not children:
        return
    check_not_self(task_id, children)
    for child in children.all:
        path = await _path_back(child, task_id, read)
        if path is not None:
            route = " -> ".join(str(i) for i in (task_id, *path))
            raise InvalidInput(children_field(children, child), f"would close a cycle: {route}", "cycle")


async def _path_back(start: int, target: int, read: ChildrenReader) -> tuple[int, ...] | None:
    came_from: dict[int, int | None] = {start: None}
    frontier = [start]
    while frontier:
        following: list[int] = []
        for node in frontier:
            found = await read(node)
            for child in () if found is None else found.all:
                if child in came_from:
                    continue
                came_from[child] = node
                if child == target:
                    return _path(came_from, child)
                if len(came_from) > MAX_WALK:
                    raise InvalidInput(FIELD, f"reaches more than {MAX_WALK} tasks through their children", "too_deep")
                following.append(child)
        frontier = following
    return None


def _path(came_from: dict[int, int | None], end: int) -> tuple[int, ...]:
    path = [end]
    step = came_from[end]
    while step is not None:
        path.append(step)
        step = came_from[step]
    return tuple(reversed(path))
