"""Every table of a MariaDB/MySQL deployment with ``STATS_AUTO_RECALC=0``: InnoDB no longer
re-samples a table's index statistics in the background each time a tenth of its rows changed.

Why: a fire rewrites its task row and inserts a flow row, so under load every ``tasks_TT`` and
``flows_TT`` table crosses that threshold again and again, and each time the statistics thread saved
the new figures while holding the data dictionary. Statements that needed to open a table (a
deployment has 50 per logical database, more than a server's table cache keeps open per connection)
waited in "Opening tables" behind it: the whole server wrote nothing for 1-4 s at a time, and the
fire bench at 2,000 fires/s measured p99 lateness 0.7-3.8 s instead of ~30 ms (docs/benchmarks.md,
"InnoDB statistics stall").

What it costs: the optimizer keeps the statistics a table had when it was created. tjobs' statements
are key lookups and index range scans whose row estimates come from index dives, not from these
figures; an operator who wants them fresh runs ``ANALYZE TABLE`` off-peak (docs/operations.md).
Metadata only (``ALGORITHM=INSTANT``): no table is rebuilt. SQLite has no such option.

Revision ID: 0010_stats_auto_recalc
Revises: 0009_flow_routes
Create Date: 2026-11-28
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations
from sqlalchemy import text

revision = "0010_stats_auto_recalc"
down_revision = "0009_flow_routes"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "table options only: ALTER TABLE ... STATS_AUTO_RECALC=0, ALGORITHM=INSTANT"

_THIS_DATABASE_TABLES = text(
    "SELECT TABLE_NAME FROM information_schema.TABLES "
    "WHERE TABLE_SCHEMA = DATABASE() AND ENGINE = 'InnoDB' ORDER BY TABLE_NAME"
)


def _set_auto_recalc(operations: Operations | None, value: str) -> None:
    op = operations or global_op
    bind = op.get_bind()
    if bind.dialect.name not in ("mysql", "mariadb"):
        return
    for (name,) in bind.execute(_THIS_DATABASE_TABLES).all():
        op.execute(f"ALTER TABLE `{name}` STATS_AUTO_RECALC={value}, ALGORITHM=INSTANT")


def upgrade(operations: Operations | None = None, **_: Any) -> None:
    _set_auto_recalc(operations, "0")


def downgrade(operations: Operations | None = None, **_: Any) -> None:
    _set_auto_recalc(operations, "DEFAULT")
