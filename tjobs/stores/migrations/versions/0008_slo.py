"""Cluster-wide service levels: ``slo_minutes`` in the first logical database, one row per (app, minute,
node) that each node adds its fires, outcomes and lateness to once a minute (:mod:`tjobs.stores.sql_slo`).

Revision ID: 0008_slo
Revises: 0007_search
Create Date: 2026-11-28
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.schema import MYSQL_TABLE_OPTIONS
from tjobs.stores.schema_slo import SLO_MINUTES_INDEXES, SLO_MINUTES_TABLE, slo_minutes_schema_items

_OPTIONS: dict[str, Any] = dict(MYSQL_TABLE_OPTIONS)

revision = "0008_slo"
down_revision = "0007_search"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a new table"


def upgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if not holds_apps:
        return
    op.create_table(SLO_MINUTES_TABLE, *slo_minutes_schema_items(), **_OPTIONS)
    for name, columns in SLO_MINUTES_INDEXES:
        op.create_index(name, SLO_MINUTES_TABLE, columns)


def downgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if holds_apps:
        op.drop_table(SLO_MINUTES_TABLE)
