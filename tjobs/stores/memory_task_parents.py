"""The memory twin's reverse index of child tasks (:class:`tjobs.stores.contracts.task_parents.TaskParentRecords`):
a set keyed as the SQL table is."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tjobs.model import TaskChildren
from tjobs.stores.contracts.task_parents import TaskParentRecords, grouped


class MemoryTaskParents(TaskParentRecords):
    def __init__(self) -> None:
        self._rows: set[tuple[int, str, int]] = set()  # (child, relation, parent)

    async def link_children(self, app_id: str, parent_id: int, children: TaskChildren) -> None:
        await asyncio.sleep(0)
        for relation, ids in (("on_success", children.on_success), ("on_failure", children.on_failure)):
            self._rows.update((child, relation, parent_id) for child in ids)

    async def unlink_parent(self, parent_id: int) -> None:
        await asyncio.sleep(0)
        self._rows = {row for row in self._rows if row[2] != parent_id}

    async def parents_of(self, child_ids: Sequence[int]) -> dict[int, TaskChildren]:
        await asyncio.sleep(0)
        wanted = set(child_ids)
        return grouped(row for row in sorted(self._rows) if row[0] in wanted)
