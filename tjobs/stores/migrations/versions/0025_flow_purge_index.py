"""Retention's read by instant: ``flows_TT`` gains the index ``flows_TT_at (scheduled_at)``
(:func:`tjobs.stores.schema.purge_flow_indexes`), so the purge's ``SELECT`` of the terminal flows
scheduled before the cut-off reads them oldest first and stops at the first one too new: one probe when
nothing is old enough. Before it, that read walked every terminal flow of the table along ``retry``
(``status, next_attempt_at``) looking for old ones (docs/operations.md, "Capacity model").

Online on MariaDB: each index is built with ``ALGORITHM=INPLACE, LOCK=NONE`` (writes continue while it
reads the table; its time grows with the table's rows). A table that has the index already keeps it.

Revision ID: 0025_flow_purge_index
Revises: 0024_task_parents
Create Date: 2026-12-03
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.migration_tables import add_indexes, drop_indexes
from tjobs.stores.schema import purge_flow_indexes

revision = "0025_flow_purge_index"
down_revision = "0024_task_parents"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "an index added to flows_TT: ALGORITHM=INPLACE, LOCK=NONE (writes continue while it builds)"


def upgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    add_indexes(operations or global_op, "flows", tables_per_database, purge_flow_indexes)


def downgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    drop_indexes(operations or global_op, "flows", tables_per_database, purge_flow_indexes)
