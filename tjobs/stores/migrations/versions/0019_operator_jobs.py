"""Operator jobs (:mod:`tjobs.stores.contracts.operator_jobs`): ``operator_jobs`` in the first logical
database, beside ``apps``: long work an operator starts once (a redrive of every matching dead letter),
run in batches by one node at a time under a lease.

Revision ID: 0019_operator_jobs
Revises: 0018_calendars
Create Date: 2026-12-04
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.migration_tables import create_missing_tables
from tjobs.stores.schema_operator_jobs import OPERATOR_JOBS_INDEXES, OPERATOR_JOBS_TABLE, operator_jobs_schema_items

revision = "0019_operator_jobs"
down_revision = "0018_calendars"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a new table"


def upgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    if holds_apps:
        table = (OPERATOR_JOBS_TABLE, operator_jobs_schema_items(), OPERATOR_JOBS_INDEXES)
        create_missing_tables(operations or global_op, [table])


def downgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if holds_apps:
        op.drop_table(OPERATOR_JOBS_TABLE)
