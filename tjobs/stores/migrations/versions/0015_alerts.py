"""Alerts (:mod:`tjobs.alerts`): ``alert_settings`` (rules and channels, JSON documents) and
``alert_states`` (per rule and subject: firing or resolved, when last notified) in the first logical
database, beside ``apps``. A table already there is left alone (a database whose recorded revision was
set back, as tests do, keeps what later revisions made).

Revision ID: 0015_alerts
Revises: 0014_slo_delivery_lateness
Create Date: 2026-12-02
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.migration_tables import create_missing_tables
from tjobs.stores.schema_alerts import (
    ALERT_SETTINGS_TABLE,
    ALERT_STATES_TABLE,
    alert_settings_schema_items,
    alert_states_schema_items,
)

revision = "0015_alerts"
down_revision = "0014_slo_delivery_lateness"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "new tables"


def upgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    if holds_apps:
        create_missing_tables(
            operations or global_op,
            [
                (ALERT_SETTINGS_TABLE, alert_settings_schema_items(), []),
                (ALERT_STATES_TABLE, alert_states_schema_items(), []),
            ],
        )


def downgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if holds_apps:
        op.drop_table(ALERT_STATES_TABLE)
        op.drop_table(ALERT_SETTINGS_TABLE)
