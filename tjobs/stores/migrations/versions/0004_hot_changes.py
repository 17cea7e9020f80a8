"""The DB-poll hot tier's ``hot_changes`` table (:mod:`tjobs.hot_tier.dbpoll`), in the first logical
database. Nodes of earlier versions created it themselves on start; where one did, it is kept as is.

Revision ID: 0004_hot_changes
Revises: 0003_layout_record
Create Date: 2026-11-25
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations
from sqlalchemy import text

from tjobs.stores.schema import HOT_CHANGES_INDEXES, HOT_CHANGES_TABLE, MYSQL_TABLE_OPTIONS, hot_changes_schema_items

_OPTIONS: dict[str, Any] = dict(MYSQL_TABLE_OPTIONS)

revision = "0004_hot_changes"
down_revision = "0003_layout_record"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a new table (kept where an older node made it)"


def upgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if not holds_apps or _exists(op, HOT_CHANGES_TABLE):
        return
    op.create_table(HOT_CHANGES_TABLE, *hot_changes_schema_items(), **_OPTIONS)
    for name, columns in HOT_CHANGES_INDEXES:
        op.create_index(name, HOT_CHANGES_TABLE, columns)


def _exists(op: Any, name: str) -> bool:
    """In the database the migration runs in (MariaDB: the one selected by ``USE``, which SQLAlchemy's
    inspector does not know as a default schema)."""
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name"
    else:
        sql = "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :name"
    return bind.execute(text(sql), {"name": name}).first() is not None


def downgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if holds_apps:
        op.drop_table(HOT_CHANGES_TABLE)
