"""A manual flow's own payload: ``flows_TT.payload`` (JSON text, NULL for every other flow), so a trigger
with a ``payload`` override sends it on every attempt of its flow, a retry after a restart included
(:func:`tjobs.stores.schema.flow_payload_column`, :meth:`tjobs.service.tasks.TaskService.trigger`).

Revision ID: 0011_flow_payload
Revises: 0010_stats_auto_recalc
Create Date: 2026-11-28
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.migration_tables import add_columns, drop_columns
from tjobs.stores.schema import flow_payload_column

revision = "0011_flow_payload"
down_revision = "0010_stats_auto_recalc"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a nullable column added last to flows_TT: ALGORITHM=INSTANT"


def upgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    add_columns(operations or global_op, "flows", tables_per_database, [flow_payload_column()], if_missing=False)


def downgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    drop_columns(operations or global_op, "flows", tables_per_database, ["payload"])
