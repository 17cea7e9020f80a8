"""The initial schema of one logical database: tasks_TT and flows_TT per shard, apps in the first.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.schema import (
    APPS_TABLE,
    MYSQL_TABLE_OPTIONS,
    apps_schema_items,
    flows_indexes,
    flows_schema_items,
    tasks_indexes,
    tasks_schema_items,
)

_OPTIONS: dict[str, Any] = dict(MYSQL_TABLE_OPTIONS)

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "new tables only (the initial schema)"


def upgrade(tables_per_database: int, holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if holds_apps:
        op.create_table(APPS_TABLE, *apps_schema_items(), **_OPTIONS)
    for table in range(tables_per_database):
        tasks = f"tasks_{table:02d}"
        op.create_table(tasks, *tasks_schema_items(tasks), **_OPTIONS)
        for name, columns in tasks_indexes(tasks):
            op.create_index(name, tasks, columns)
        flows = f"flows_{table:02d}"
        op.create_table(flows, *flows_schema_items(flows), **_OPTIONS)
        for name, columns in flows_indexes(flows):
            op.create_index(name, flows, columns)


def downgrade(tables_per_database: int, holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    for table in reversed(range(tables_per_database)):
        op.drop_table(f"flows_{table:02d}")
        op.drop_table(f"tasks_{table:02d}")
    if holds_apps:
        op.drop_table(APPS_TABLE)
