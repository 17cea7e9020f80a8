"""Task counts kept by deltas: ``task_counts`` in every logical database, one row per (app, status, tasks
table) (:func:`tjobs.stores.schema.task_counts_schema_items`), filled here from a count of the rows each
``tasks_TT`` holds, in one ``INSERT … SELECT`` per table.

Run while no node writes (as every migration): a write between a table's count and the first node's start
would be missing from its rows until the reconciliation reaches that table
(:meth:`tjobs.stores.contracts.TaskRecords.reconcile_task_counts`). A database whose ``alembic_version``
was set back and that has the table already keeps it, counts and all.

Revision ID: 0022_task_counts
Revises: 0021_flow_runs
Create Date: 2026-12-02
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations
from sqlalchemy import text

from tjobs.stores.schema import MYSQL_TABLE_OPTIONS, TASK_COUNTS_TABLE, task_counts_schema_items

_OPTIONS: dict[str, Any] = dict(MYSQL_TABLE_OPTIONS)

revision = "0022_task_counts"
down_revision = "0021_flow_runs"
branch_labels = None
depends_on = None
ONLINE = False  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "fills task_counts from a count of each tasks_TT that older nodes' later writes miss"


def upgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if _exists(op, TASK_COUNTS_TABLE):
        return
    op.create_table(TASK_COUNTS_TABLE, *task_counts_schema_items(), **_OPTIONS)
    for index in range(tables_per_database):
        op.execute(
            text(
                f"INSERT INTO {TASK_COUNTS_TABLE} (app_id, status, table_index, n) "
                f"SELECT app_id, status, {index:d}, COUNT(*) FROM tasks_{index:02d} GROUP BY app_id, status"
            )
        )


def _exists(op: Any, name: str) -> bool:
    """In the database the migration runs in (MariaDB: the one selected by ``USE``, which SQLAlchemy's
    inspector does not know as a default schema), as 0004 asks."""
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name"
    else:
        sql = "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :name"
    return bind.execute(text(sql), {"name": name}).first() is not None


def downgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    op.drop_table(TASK_COUNTS_TABLE)
