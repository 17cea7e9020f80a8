"""The reverse index of child tasks (:class:`tjobs.stores.contracts.task_parents.TaskParentRecords`), in
the first logical database only, beside ``apps``: one row per (child, relation, parent) that a parent's
``children`` names (migration 0024). A parent's rows are written before its task row, and only a deleted
parent's are removed, so a row may be stale (its parent no longer names the child): every reader checks
the parent task."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, MetaData, PrimaryKeyConstraint, String, Table
from sqlalchemy.schema import SchemaItem

from tjobs.stores.schema import _table

TASK_PARENTS_TABLE = "task_parents"


def task_parents_schema_items() -> list[SchemaItem]:
    return [
        Column("child_id", BigInteger, nullable=False, autoincrement=False),
        Column("relation", String(16), nullable=False),  # on_success, on_failure
        Column("parent_id", BigInteger, nullable=False, autoincrement=False),
        Column("app_id", String(64), nullable=False),
        PrimaryKeyConstraint("child_id", "relation", "parent_id"),
    ]


def task_parents_indexes() -> list[tuple[str, list[str]]]:
    return [(f"{TASK_PARENTS_TABLE}_parent", ["parent_id"])]  # a deleted parent's rows


def task_parents_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, TASK_PARENTS_TABLE, schema, task_parents_schema_items(), task_parents_indexes())
