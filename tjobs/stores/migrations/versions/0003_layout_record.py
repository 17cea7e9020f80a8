"""The layout record: what the data was laid out for, so a node started otherwise refuses to run.

``tjobs migrate`` (or a node's first start) writes the facts; see :mod:`tjobs.stores.layout_record`.

Revision ID: 0003_layout_record
Revises: 0002_task_revision
Create Date: 2026-11-25
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.schema import LAYOUT_TABLE, MYSQL_TABLE_OPTIONS, layout_schema_items

_OPTIONS: dict[str, Any] = dict(MYSQL_TABLE_OPTIONS)

revision = "0003_layout_record"
down_revision = "0002_task_revision"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a new table"


def upgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if holds_apps:
        op.create_table(LAYOUT_TABLE, *layout_schema_items(), **_OPTIONS)


def downgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if holds_apps:
        op.drop_table(LAYOUT_TABLE)
