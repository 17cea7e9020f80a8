"""A flow's newest answers: ``flows_TT.answers`` (JSON text, NULL before the first answer), each of the
newest sends' status, headers (masked, capped) and the body's first 4 KiB, written whole by the
``UPDATE`` that records each outcome (:func:`tjobs.stores.schema.flow_answers_column`).

Metadata only on MariaDB (a nullable column added last, ``ALGORITHM=INSTANT``); the table options,
``STATS_AUTO_RECALC=0`` included, are untouched. A table that has the column already keeps it: a database
whose ``alembic_version`` was set back runs the later revisions again (as 0014 does).

Revision ID: 0020_flow_answers
Revises: 0019_operator_jobs
Create Date: 2026-12-02
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.migration_tables import add_columns, drop_columns
from tjobs.stores.schema import flow_answers_column

revision = "0020_flow_answers"
down_revision = "0019_operator_jobs"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a nullable column added last to flows_TT: ALGORITHM=INSTANT"


def upgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    add_columns(operations or global_op, "flows", tables_per_database, [flow_answers_column()], if_missing=True)


def downgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    drop_columns(operations or global_op, "flows", tables_per_database, ["answers"])
