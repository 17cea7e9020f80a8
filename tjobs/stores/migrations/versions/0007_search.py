"""Search across shards (:mod:`tjobs.stores.sql_search`): the ordered index ranges it reads.

Per shard: ``tasks_TT`` gains the virtual column ``schedule_kind`` (the schedule's kind, computed by
the database from the stored JSON, so no writer changes) and indexes ``(app_id, name, id)``,
``(app_id, status, id)`` and ``(app_id, schedule_kind, id)``; ``flows_TT`` gains ``(app_id,
scheduled_at, task_id)`` and ``(app_id, status, scheduled_at, task_id)``. On MariaDB the task name
compares by code point without trailing-space padding (``utf8mb4_nopad_bin``), as in SQLite and in
memory, so every store orders names as the search merges them. One ``ALTER TABLE`` per table.

Revision ID: 0007_search
Revises: 0006_shard_map
Create Date: 2026-11-28
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.schema import (
    SCHEDULE_KIND_COLUMN,
    SCHEDULE_KIND_EXPRESSION,
    search_flow_indexes,
    search_task_indexes,
)

revision = "0007_search"
down_revision = "0006_shard_map"
branch_labels = None
depends_on = None
ONLINE = False  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "MODIFY of tasks_TT.name's collation copies every tasks table (ALGORITHM=COPY)"

_NAME = "name VARCHAR(200) NOT NULL COLLATE"


def _columns(columns: list[str]) -> str:
    return ", ".join(f"`{column}`" for column in columns)


def upgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    mysql = op.get_bind().dialect.name != "sqlite"
    expression = SCHEDULE_KIND_EXPRESSION["mysql" if mysql else "sqlite"]
    for table in range(tables_per_database):
        tasks, flows = f"tasks_{table:02d}", f"flows_{table:02d}"
        if mysql:
            changes = [
                f"MODIFY {_NAME} utf8mb4_nopad_bin",
                f"ADD COLUMN {SCHEDULE_KIND_COLUMN} VARCHAR(16) AS ({expression}) VIRTUAL",
                *(f"ADD INDEX `{name}` ({_columns(columns)})" for name, columns in search_task_indexes(tasks)),
            ]
            op.execute(f"ALTER TABLE `{tasks}` {', '.join(changes)}")
            adds = (f"ADD INDEX `{name}` ({_columns(columns)})" for name, columns in search_flow_indexes(flows))
            op.execute(f"ALTER TABLE `{flows}` {', '.join(adds)}")
            continue
        op.execute(
            f'ALTER TABLE "{tasks}" ADD COLUMN {SCHEDULE_KIND_COLUMN} VARCHAR(16) '
            f"GENERATED ALWAYS AS ({expression}) VIRTUAL"
        )
        for name, columns in search_task_indexes(tasks):
            op.create_index(name, tasks, columns)
        for name, columns in search_flow_indexes(flows):
            op.create_index(name, flows, columns)


def downgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    mysql = op.get_bind().dialect.name != "sqlite"
    for table in range(tables_per_database):
        tasks, flows = f"tasks_{table:02d}", f"flows_{table:02d}"
        for name, _cols in search_flow_indexes(flows):
            op.drop_index(name, flows)
        for name, _cols in search_task_indexes(tasks):
            op.drop_index(name, tasks)
        if mysql:
            op.execute(f"ALTER TABLE `{tasks}` DROP COLUMN {SCHEDULE_KIND_COLUMN}, MODIFY {_NAME} utf8mb4_bin")
        else:
            op.execute(f'ALTER TABLE "{tasks}" DROP COLUMN {SCHEDULE_KIND_COLUMN}')
