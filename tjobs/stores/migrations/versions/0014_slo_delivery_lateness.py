"""Delivery lateness in the service levels: ``slo_minutes`` and ``slo_hours`` gain two histograms of the
first attempts' lateness, when the request was written (``first_send_lateness_NN``) and when the answer
came back (``first_answer_lateness_NN``), zero in the rows already stored (they were not measured then).

A column already there is left alone: revisions 0008 and 0013 create their tables from the current
schema, so a database migrated from scratch has them before this revision runs. Metadata only on
MariaDB (``NOT NULL DEFAULT 0`` columns added last, ``ALGORITHM=INSTANT``).

Revision ID: 0014_slo_delivery_lateness
Revises: 0013_slo_hours
Create Date: 2026-12-02
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations
from sqlalchemy import inspect

from tjobs.stores.schema_slo import (
    SLO_ANSWER_LATENESS_COLUMNS,
    SLO_HOURS_TABLE,
    SLO_MINUTES_TABLE,
    SLO_SEND_LATENESS_COLUMNS,
    slo_count_column,
)

revision = "0014_slo_delivery_lateness"
down_revision = "0013_slo_hours"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "NOT NULL DEFAULT 0 columns added last to the SLO tables: ALGORITHM=INSTANT"

_ADDED = (*SLO_SEND_LATENESS_COLUMNS, *SLO_ANSWER_LATENESS_COLUMNS)


def upgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if not holds_apps:
        return
    for table in (SLO_MINUTES_TABLE, SLO_HOURS_TABLE):
        present = {column["name"] for column in inspect(op.get_bind()).get_columns(table)}
        missing = [name for name in _ADDED if name not in present]
        if missing:
            with op.batch_alter_table(table) as batch:
                for name in missing:
                    batch.add_column(slo_count_column(name))


def downgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if not holds_apps:
        return
    for table in (SLO_MINUTES_TABLE, SLO_HOURS_TABLE):
        with op.batch_alter_table(table) as batch:
            for name in _ADDED:
                batch.drop_column(name)
