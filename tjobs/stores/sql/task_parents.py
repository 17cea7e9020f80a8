"""The SQL store's reverse index of child tasks (:class:`tjobs.stores.contracts.task_parents.TaskParentRecords`):
``task_parents`` of the first logical database, over the engines of the
:class:`tjobs.stores.sqlalchemy.SQLAlchemyTaskStore` it is given (no pool of its own). A link is one
``INSERT`` that passes over the rows there already (``IGNORE`` / ``ON CONFLICT DO NOTHING``); a child's
parents, one read by the primary key's prefix."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import MetaData, delete, insert, select
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from tjobs.model import TaskChildren
from tjobs.stores.contracts.task_parents import TaskParentRecords, grouped
from tjobs.stores.schema import children_from_text
from tjobs.stores.schema_task_parents import task_parents_table
from tjobs.stores.sql.apps_records import AppsDatabaseRecords
from tjobs.stores.sql_layout import MYSQL

_METADATA = MetaData()
PARENTS = task_parents_table(_METADATA)  # unqualified: the apps database's options point it there


class SqlTaskParents(AppsDatabaseRecords, TaskParentRecords):
    async def link_children(self, app_id: str, parent_id: int, children: TaskChildren) -> None:
        await self._insert(_links(app_id, parent_id, children))

    async def _insert(self, rows: list[dict[str, object]]) -> None:
        if not rows:
            return
        if self._store.layout.dialect == MYSQL:
            statement = insert(PARENTS).prefix_with("IGNORE")
        else:
            statement = sqlite_insert(PARENTS).on_conflict_do_nothing()
        async with self._store._write(self._url) as conn:
            await conn.execute(statement, rows, execution_options=self._options)

    async def unlink_parent(self, parent_id: int) -> None:
        async with self._store._write(self._url) as conn:
            await conn.execute(delete(PARENTS).where(PARENTS.c.parent_id == parent_id), execution_options=self._options)

    async def parents_of(self, child_ids: Sequence[int]) -> dict[int, TaskChildren]:
        if not child_ids:
            return {}
        c = PARENTS.c
        statement = (
            select(c.child_id, c.relation, c.parent_id)
            .where(c.child_id.in_(sorted(set(child_ids))))
            .order_by(c.child_id, c.relation, c.parent_id)
        )
        async with self._store._connect(self._url) as conn:
            rows = (await conn.execute(statement, execution_options=self._options)).all()
        return grouped((int(child), str(relation), int(parent)) for child, relation, parent in rows)

    async def index_tasks(self, shard: int, after_id: int, limit: int) -> tuple[int, int | None]:
        """Index the children of the tasks of ``shard`` whose id comes after ``after_id``, at most ``limit``
        tasks (one read of the tasks' primary key range, their ``id``, ``app_id`` and ``children``; one
        ``INSERT`` passing over the links there already): a task whose children were set before migration
        0024 (:mod:`tjobs.service.child_index`). Returns the links written or kept, and the last id read
        (``None``: the shard has no task after ``after_id``)."""
        home = self._store._shard(shard)
        t = home.tasks.c
        pick = select(t.id, t.app_id, t.children).where(t.id > after_id).order_by(t.id).limit(limit)
        async with self._store._connect(home.database.engine_url) as conn:
            read = (await conn.execute(pick, execution_options=home.options)).all()
        rows: list[dict[str, object]] = []
        for task_id, app_id, text in read:
            children = children_from_text(text)
            if children is not None:
                rows += _links(str(app_id), int(task_id), children)
        await self._insert(rows)
        return len(rows), (int(read[-1][0]) if read else None)


def _links(app_id: str, parent_id: int, children: TaskChildren) -> list[dict[str, object]]:
    """The rows saying that ``parent_id`` names each of ``children`` in its relation."""
    return [
        {"child_id": child, "relation": relation, "parent_id": parent_id, "app_id": app_id}
        for relation, ids in (("on_success", children.on_success), ("on_failure", children.on_failure))
        for child in ids
    ]
