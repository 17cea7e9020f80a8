"""A flow's attempt history: ``flows_TT.attempt_log`` (JSON text, NULL before the first attempt), the
newest attempts' outcomes (number, start, duration, status code, error, destination) and how many there
were, written whole by the ``UPDATE`` that records each outcome (:func:`tjobs.stores.schema.flow_attempt_log_column`).

Metadata only on MariaDB (a nullable column added last, ``ALGORITHM=INSTANT``); the table options,
``STATS_AUTO_RECALC=0`` included, are untouched.

Revision ID: 0012_flow_attempt_log
Revises: 0011_flow_payload
Create Date: 2026-11-28
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.migration_tables import add_columns, drop_columns
from tjobs.stores.schema import flow_attempt_log_column

revision = "0012_flow_attempt_log"
down_revision = "0011_flow_payload"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a nullable column added last to flows_TT: ALGORITHM=INSTANT"


def upgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    add_columns(operations or global_op, "flows", tables_per_database, [flow_attempt_log_column()], if_missing=False)


def downgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    drop_columns(operations or global_op, "flows", tables_per_database, ["attempt_log"])
