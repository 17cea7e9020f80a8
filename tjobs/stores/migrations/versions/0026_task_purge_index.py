"""Retention's read of the completed tasks by age: ``tasks_TT`` gains the index ``tasks_TT_done``
(:func:`tjobs.stores.schema.purge_task_indexes`), so the purge's ``SELECT`` of the completed tasks last
updated before the cut-off reads them oldest first and stops at the first one too new: one probe when
nothing is old enough. Before it, that read walked every completed task of the table along ``due``
(``status, next_run_at``; NULL for a completed task) looking for old ones (docs/operations.md, "Capacity
model").

On MariaDB the index is of the virtual column ``completed_at`` (``updated_at`` of a completed task, NULL
otherwise: :data:`tjobs.stores.schema.COMPLETED_AT_COLUMN`), added with ``ALGORITHM=INSTANT`` (a virtual
column is metadata: no row is rewritten, unlike the stored columns 0023 adds), then indexed with
``ALGORITHM=INPLACE, LOCK=NONE`` (writes continue while it reads the table; its time grows with the
table's rows); MariaDB 10.11 accepts both with ``schedule_kind`` (0007) indexed, and would refuse the
statement rather than block writes. On SQLite a partial index of ``updated_at`` ``WHERE status =
'completed'``. A table that has the column or the index already keeps it.

Revision ID: 0026_task_purge_index
Revises: 0025_flow_purge_index
Create Date: 2026-12-03
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations
from sqlalchemy import inspect

from tjobs.stores.schema import COMPLETED_AT_COLUMN, COMPLETED_AT_EXPRESSION, purge_task_indexes

revision = "0026_task_purge_index"
down_revision = "0025_flow_purge_index"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a virtual column (ALGORITHM=INSTANT) and its index (INPLACE, LOCK=NONE); SQLite: a partial index"


def upgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    bind = op.get_bind()
    mysql = bind.dialect.name != "sqlite"
    for index in range(tables_per_database):
        table = f"tasks_{index:02d}"
        present = {found["name"] for found in inspect(bind).get_indexes(table)}
        if mysql:
            columns = {column["name"] for column in inspect(bind).get_columns(table)}
            if COMPLETED_AT_COLUMN not in columns:
                op.execute(
                    f"ALTER TABLE `{table}` ADD COLUMN `{COMPLETED_AT_COLUMN}` BIGINT "
                    f"AS ({COMPLETED_AT_EXPRESSION}) VIRTUAL, ALGORITHM=INSTANT"
                )
        for name, listed in purge_task_indexes(table, "mysql" if mysql else "sqlite"):
            if name in present:
                continue
            if mysql:
                keys = ", ".join(f"`{column}`" for column in listed)
                op.execute(f"ALTER TABLE `{table}` ADD INDEX `{name}` ({keys}), ALGORITHM=INPLACE, LOCK=NONE")
            else:
                keys = ", ".join(f'"{column}"' for column in listed)
                op.execute(f'CREATE INDEX "{name}" ON "{table}" ({keys}) WHERE status = \'completed\'')


def downgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    mysql = op.get_bind().dialect.name != "sqlite"
    for index in range(tables_per_database):
        table = f"tasks_{index:02d}"
        for name, _listed in purge_task_indexes(table, "mysql" if mysql else "sqlite"):
            op.drop_index(name, table)
        if mysql:
            op.execute(f"ALTER TABLE `{table}` DROP COLUMN `{COMPLETED_AT_COLUMN}`")
