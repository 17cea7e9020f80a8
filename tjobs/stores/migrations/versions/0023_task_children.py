"""A task's child tasks (README "Child tasks"): ``tasks_TT.children`` (JSON text, NULL for a task naming
none; :func:`tjobs.stores.schema.task_children_column`).

Offline on MariaDB: it refuses ``ALGORITHM=INSTANT`` and ``LOCK=NONE`` for a column added to ``tasks_TT``
("online rebuild with indexed virtual columns": ``schedule_kind``, 0007), so each table is rebuilt with
writes blocked (``LOCK=SHARED``), fires on it held for a time that grows with its rows
(``python -m benchmarks online_migration --algorithm INPLACE_SHARED``). A table that has the column already
keeps it: a database whose ``alembic_version`` was set back runs the later revisions again.

Revision ID: 0023_task_children
Revises: 0022_task_counts
Create Date: 2026-12-02
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.migration_tables import add_columns, drop_columns
from tjobs.stores.schema import task_children_column

revision = "0023_task_children"
down_revision = "0022_task_counts"
branch_labels = None
depends_on = None
ONLINE = False  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = (
    "a column added to tasks_TT: MariaDB rebuilds each table with writes blocked (LOCK=SHARED; indexed virtual column)"
)


def upgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    add_columns(operations or global_op, "tasks", tables_per_database, [task_children_column()], if_missing=True)


def downgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    drop_columns(operations or global_op, "tasks", tables_per_database, ["children"])
