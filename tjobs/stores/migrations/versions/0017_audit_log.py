"""The audit log (:class:`tjobs.stores.contracts.audit.AuditLog`): ``audit_log`` in the first logical
database, beside ``apps``: who changed what (before -> after), when, from where, through which client.

Revision ID: 0017_audit_log
Revises: 0016_accounts
Create Date: 2026-12-02
"""

from __future__ import annotations

from tjobs.stores.migration_app_tables import app_tables
from tjobs.stores.schema_audit import AUDIT_LOG_INDEXES, AUDIT_LOG_TABLE, audit_log_schema_items

revision = "0017_audit_log"
down_revision = "0016_accounts"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a new table"

upgrade, downgrade = app_tables((AUDIT_LOG_TABLE, audit_log_schema_items, AUDIT_LOG_INDEXES))
