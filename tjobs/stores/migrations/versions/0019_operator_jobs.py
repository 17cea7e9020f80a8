"""Operator jobs (:mod:`tjobs.stores.contracts.operator_jobs`): ``operator_jobs`` in the first logical
database, beside ``apps``: long work an operator starts once (a redrive of every matching dead letter),
run in batches by one node at a time under a lease.

Revision ID: 0019_operator_jobs
Revises: 0018_calendars
Create Date: 2026-12-04
"""

from __future__ import annotations

from tjobs.stores.migration_app_tables import app_tables
from tjobs.stores.schema_operator_jobs import OPERATOR_JOBS_INDEXES, OPERATOR_JOBS_TABLE, operator_jobs_schema_items

revision = "0019_operator_jobs"
down_revision = "0018_calendars"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a new table"

upgrade, downgrade = app_tables((OPERATOR_JOBS_TABLE, operator_jobs_schema_items, OPERATOR_JOBS_INDEXES))
