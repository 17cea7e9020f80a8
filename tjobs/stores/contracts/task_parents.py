"""The reverse index of child tasks (README "Child tasks"): which tasks name a task among their children,
beside the apps in the first logical database, so a child's parents are found without reading every task.

A parent's rows are added before its task row is written (create, edit) and removed only when it is
deleted; an edit that drops a child leaves its row. A row may therefore be stale (its parent gone, or no
longer naming the child): every reader reads the parent task and ignores such a row
(:mod:`tjobs.service.child_flows`). Tasks whose children were set before migration 0024 have no rows until
they are edited, or indexed by ``tjobs index-children`` (:mod:`tjobs.service.child_index`).

The role stands beside :class:`tjobs.stores.base.TaskStore`, over the same databases:
:func:`tjobs.stores.task_parent_store.task_parents_of` gives a store's (the SQL store's shares its
engines; the memory twin's is a dict of its own).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

from tjobs.model import TaskChildren


class TaskParentRecords(ABC):
    @abstractmethod
    async def link_children(self, app_id: str, parent_id: int, children: TaskChildren) -> None:
        """Record that ``parent_id`` (of ``app_id``) names each of ``children`` in its relation; a row
        there already is kept."""

    @abstractmethod
    async def unlink_parent(self, parent_id: int) -> None:
        """Forget every row of ``parent_id`` (deleted)."""

    @abstractmethod
    async def parents_of(self, child_ids: Sequence[int]) -> dict[int, TaskChildren]:
        """The parents recorded for each of ``child_ids`` that has any: ``on_success`` the tasks naming it
        in theirs, ``on_failure`` likewise, each in ascending id order."""


def grouped(rows: Iterable[tuple[int, str, int]]) -> dict[int, TaskChildren]:
    """Rows (child, relation, parent), sorted, as :meth:`TaskParentRecords.parents_of` answers them."""
    found: dict[int, dict[str, list[int]]] = {}
    for child, relation, parent in rows:
        found.setdefault(int(child), {"on_success": [], "on_failure": []})[relation].append(int(parent))
    return {child: TaskChildren(tuple(r["on_success"]), tuple(r["on_failure"])) for child, r in found.items()}
