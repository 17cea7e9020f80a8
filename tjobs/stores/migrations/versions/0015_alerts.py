"""Alerts (:mod:`tjobs.alerts`): ``alert_settings`` (rules and channels, JSON documents) and
``alert_states`` (per rule and subject: firing or resolved, when last notified) in the first logical
database, beside ``apps``. A table already there is left alone (a database whose recorded revision was
set back, as tests do, keeps what later revisions made).

Revision ID: 0015_alerts
Revises: 0014_slo_delivery_lateness
Create Date: 2026-12-02
"""

from __future__ import annotations

from tjobs.stores.migration_app_tables import app_tables
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

upgrade, downgrade = app_tables(
    (ALERT_SETTINGS_TABLE, alert_settings_schema_items, []),
    (ALERT_STATES_TABLE, alert_states_schema_items, []),
)
