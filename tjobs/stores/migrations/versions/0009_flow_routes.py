"""A pool flow's route log: ``flows_TT.routes`` (JSON ``[[attempt, destination, executor id], ...]``,
NULL for every other flow), so the flow API says which executor got which attempt
(:func:`tjobs.stores.schema.flow_routes_column`, :mod:`tjobs.delivery.pool_dispatcher`).

Revision ID: 0009_flow_routes
Revises: 0008_slo
Create Date: 2026-11-28
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.migration_tables import add_columns, drop_columns
from tjobs.stores.schema import flow_routes_column

revision = "0009_flow_routes"
down_revision = "0008_slo"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a nullable column added last to flows_TT: ALGORITHM=INSTANT"


def upgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    add_columns(operations or global_op, "flows", tables_per_database, [flow_routes_column()], if_missing=False)


def downgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    drop_columns(operations or global_op, "flows", tables_per_database, ["routes"])
