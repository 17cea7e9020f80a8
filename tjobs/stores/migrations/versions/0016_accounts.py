"""Operator accounts, in the first logical database beside ``apps``: ``users`` (password hash with its
parameters, global admin flag, roles per app, disabled), ``api_tokens`` (personal API tokens by the
SHA-256 of the token) and ``console_sessions`` (server-side console sessions by the SHA-256 of their id).

A table already there is left alone (a database whose ``alembic_version`` was set back re-runs this).

Revision ID: 0016_accounts
Revises: 0015_alerts
Create Date: 2026-12-02
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.migration_tables import create_missing_tables
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


def upgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    if holds_apps:
        create_missing_tables(
            operations or global_op,
            [
                (USERS_TABLE, users_schema_items(), []),
                (API_TOKENS_TABLE, api_tokens_schema_items(), API_TOKENS_INDEXES),
                (CONSOLE_SESSIONS_TABLE, console_sessions_schema_items(), CONSOLE_SESSIONS_INDEXES),
            ],
        )


def downgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if holds_apps:
        for name in (CONSOLE_SESSIONS_TABLE, API_TOKENS_TABLE, USERS_TABLE):
            op.drop_table(name)
