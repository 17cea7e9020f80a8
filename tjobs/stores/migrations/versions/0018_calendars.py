"""Calendars (:mod:`tjobs.specs.calendar`): ``calendars`` in the first logical database, beside ``apps``:
an app's named exclusion rules, which recurring schedules reference by name.

Revision ID: 0018_calendars
Revises: 0017_audit_log
Create Date: 2026-12-02
"""

from __future__ import annotations

from tjobs.stores.migration_app_tables import app_tables
from tjobs.stores.schema_calendars import CALENDARS_TABLE, calendars_schema_items

revision = "0018_calendars"
down_revision = "0017_audit_log"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a new table"

upgrade, downgrade = app_tables((CALENDARS_TABLE, calendars_schema_items, []))
