"""The links between a task and its children, both ways (README "Child tasks"): a task's ``children``
checked at create and edit (:mod:`tjobs.service.child_tasks`) and recorded in the reverse index before the
task row is written (:class:`tjobs.stores.contracts.task_parents.TaskParentRecords`), and a task's parents
read back through it. An index row is trusted only where its parent, read now, still names the child in
that relation (:func:`parent_naming`): an edit that dropped the child leaves its row, and a create that
failed after its rows were written leaves them too.
"""

from __future__ import annotations

from collections.abc import Callable

from tjobs.cancellation import waited_at_most
from tjobs.errors import InvalidInput, StorageUnavailable
from tjobs.model import App, Task, TaskChildren
from tjobs.service.child_tasks import check_no_cycle, check_not_self, children_field
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.task_parents import TaskParentRecords


async def parent_naming(
    store: TaskStore, routable: Callable[[int], bool], app_id: str, parent_id: int, child_id: int, relation: str
) -> Task | None:
    """Task ``parent_id`` as stored now, where it is of ``app_id`` and names ``child_id`` in ``relation``
    (``on_success`` / ``on_failure``); otherwise ``None`` (a stale index row)."""
    parent = await store.get_task(parent_id) if routable(parent_id) else None
    if parent is None or parent.app_id != app_id or parent.children is None:
        return None
    named: tuple[int, ...] = getattr(parent.children, relation)
    return parent if child_id in named else None


class ChildLinks:
    def __init__(
        self,
        store: TaskStore,
        parents: TaskParentRecords | None,
        routable: Callable[[int], bool],
        link_deadline_s: float | None = None,
    ) -> None:
        """``parents``: the reverse index (``None``: none kept, and no task shows parents). It lives on the
        server holding the apps table, whatever server the task's shard is on: a create or edit waits for
        its links at most ``link_deadline_s`` (``storage.create_timeout_s``), then gets
        :class:`StorageUnavailable` and its task is not written (links that commit later are stale rows,
        which every reader checks)."""
        self._store = store
        self._parents = parents
        self._routable = routable
        self._link_deadline_s = link_deadline_s

    async def check_and_link(self, app: App, task_id: int, children: TaskChildren | None) -> None:
        """422 naming the entry of ``children`` that is the task itself, no task of the app, or closes a
        cycle through the stored tasks' children; then record the links, before the task row is written."""
        if not children:
            return
        check_not_self(task_id, children)
        for child in children.all:
            found = await self._store.get_task(child) if self._routable(child) else None
            if found is None or found.app_id != app.id:
                raise InvalidInput(children_field(children, child), f"the app has no task {child}", "unknown_task")

        async def read(other: int) -> TaskChildren | None:
            found = await self._store.get_task(other) if self._routable(other) else None
            return None if found is None or found.app_id != app.id else found.children

        await check_no_cycle(task_id, children, read)
        if self._parents is not None:
            await self._link(app.id, task_id, children)

    async def _link(self, app_id: str, task_id: int, children: TaskChildren) -> None:
        assert self._parents is not None
        link = self._parents.link_children(app_id, task_id, children)
        if self._link_deadline_s is None:
            return await link
        deadline_s = self._link_deadline_s
        # not cancelled at the deadline: a write is not cut mid-statement; if it commits, its rows are stale
        await waited_at_most(
            link,
            deadline_s,
            lambda: StorageUnavailable(
                f"the links to task {task_id}'s children (on the database server holding the apps table) were "
                f"not written within {deadline_s:g} s; the task was not stored; retry after "
                f"{StorageUnavailable.retry_after_s} s"
            ),
        )

    async def unlink(self, task_id: int) -> None:
        """Task ``task_id`` was deleted: forget its links."""
        if self._parents is not None:
            await self._parents.unlink_parent(task_id)

    async def parents(self, task: Task) -> TaskChildren | None:
        """The tasks that name ``task`` among their children now (``None``: none), per relation."""
        if self._parents is None:
            return None
        recorded = (await self._parents.parents_of([task.id])).get(task.id)
        if recorded is None:
            return None
        lists: list[tuple[int, ...]] = []
        for relation in ("on_success", "on_failure"):
            ids: tuple[int, ...] = getattr(recorded, relation)
            named = [
                p for p in ids if await parent_naming(self._store, self._routable, task.app_id, p, task.id, relation)
            ]
            lists.append(tuple(named))
        found = TaskChildren(*lists)
        return found if found else None
