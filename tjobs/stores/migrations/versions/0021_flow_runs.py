"""A flow's runs (README "Job runs"): ``flows_TT.run`` (JSON text, the newest run), ``flows_TT.run_log``
(its log lines, appended in place) and ``flows_TT.run_log_lines`` (their count, the appends' guard), all
NULL before a target accepts an attempt as a run (:func:`tjobs.stores.schema.flow_run_columns`).

Metadata only on MariaDB (nullable columns added last, ``ALGORITHM=INSTANT``); the table options are
untouched. A table that has a column already keeps it: a database whose ``alembic_version`` was set back
runs the later revisions again (as 0020 does).

Revision ID: 0021_flow_runs
Revises: 0020_flow_answers
Create Date: 2026-12-02
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.migration_tables import add_columns, drop_columns
from tjobs.stores.schema import flow_run_columns

revision = "0021_flow_runs"
down_revision = "0020_flow_answers"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "nullable columns added last to flows_TT: ALGORITHM=INSTANT"


def upgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    add_columns(operations or global_op, "flows", tables_per_database, flow_run_columns(), if_missing=True)


def downgrade(tables_per_database: int, operations: Operations | None = None, **_: Any) -> None:
    drop_columns(
        operations or global_op, "flows", tables_per_database, [column.name for column in reversed(flow_run_columns())]
    )
