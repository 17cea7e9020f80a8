"""Named delivery targets (:mod:`tjobs.targets`): ``targets`` in the first logical database, beside
``apps``, and per shard ``task_targets_TT``, one row per (target, task) naming it.

Revision ID: 0005_targets
Revises: 0004_hot_changes
Create Date: 2026-11-27
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.schema import (
    MYSQL_TABLE_OPTIONS,
    TARGETS_TABLE,
    targets_schema_items,
    task_targets_indexes,
    task_targets_schema_items,
    task_targets_table_name,
)

_OPTIONS: dict[str, Any] = dict(MYSQL_TABLE_OPTIONS)

revision = "0005_targets"
down_revision = "0004_hot_changes"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "new tables"


def upgrade(tables_per_database: int, holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if holds_apps:
        op.create_table(TARGETS_TABLE, *targets_schema_items(), **_OPTIONS)
    for table in range(tables_per_database):
        name = task_targets_table_name(table)
        op.create_table(name, *task_targets_schema_items(name), **_OPTIONS)
        for index_name, columns in task_targets_indexes(name):
            op.create_index(index_name, name, columns)


def downgrade(tables_per_database: int, holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    for table in reversed(range(tables_per_database)):
        op.drop_table(task_targets_table_name(table))
    if holds_apps:
        op.drop_table(TARGETS_TABLE)
