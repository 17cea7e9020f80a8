"""A task's ``revision``: the version its owner's edits move (fires only move ``version``).

Existing rows start at their current ``version``, so a client holding a version it read before the
upgrade still passes the check on its next edit.

Revision ID: 0002_task_revision
Revises: 0001_initial
Create Date: 2026-11-25
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations
from sqlalchemy import column, table

from tjobs.stores.schema import task_revision_column

revision = "0002_task_revision"
down_revision = "0001_initial"
branch_labels = None
depends_on = None
ONLINE = False  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "rewrites every task row (UPDATE tasks_TT SET revision = version) in one transaction"


def upgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    for index in range(tables_per_database):
        name = f"tasks_{index:02d}"
        op.add_column(name, task_revision_column())
        tasks = table(name, column("revision"), column("version"))
        op.execute(tasks.update().values(revision=tasks.c.version))


def downgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    for index in range(tables_per_database):
        with op.batch_alter_table(f"tasks_{index:02d}") as batch:
            batch.drop_column("revision")
