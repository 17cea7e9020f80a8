"""Operator accounts, in the first logical database beside ``apps``: ``users`` (password hash with its
parameters, global admin flag, roles per app, disabled), ``api_tokens`` (personal API tokens by the
SHA-256 of the token) and ``console_sessions`` (server-side console sessions by the SHA-256 of their id).

A table already there is left alone (a database whose ``alembic_version`` was set back re-runs this).

Revision ID: 0016_accounts
Revises: 0015_alerts
Create Date: 2026-12-02
"""

from __future__ import annotations

from tjobs.stores.migration_app_tables import app_tables
from tjobs.stores.schema_accounts import (
    API_TOKENS_INDEXES,
    API_TOKENS_TABLE,
    CONSOLE_SESSIONS_INDEXES,
    CONSOLE_SESSIONS_TABLE,
    USERS_TABLE,
    api_tokens_schema_items,
    console_sessions_schema_items,
    users_schema_items,
)

revision = "0016_accounts"
down_revision = "0015_alerts"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "new tables"

upgrade, downgrade = app_tables(
    (USERS_TABLE, users_schema_items, []),
    (API_TOKENS_TABLE, api_tokens_schema_items, API_TOKENS_INDEXES),
    (CONSOLE_SESSIONS_TABLE, console_sessions_schema_items, CONSOLE_SESSIONS_INDEXES),
)
