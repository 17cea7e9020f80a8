"""Per-hour service levels: ``slo_hours`` beside ``slo_minutes`` in the first logical database, one row per
(app, hour, node) holding the sums of that node's minutes of the hour, so a day or a week reads whole hours
(:mod:`tjobs.stores.slo_hours`). Filled here from the minutes already stored; from then on every node adds
to both tables in one transaction.

Revision ID: 0013_slo_hours
Revises: 0012_flow_attempt_log
Create Date: 2026-11-29
"""

from __future__ import annotations

from typing import Any

from alembic import op as global_op
from alembic.operations import Operations
from sqlalchemy import MetaData, func, insert, select

from tjobs.stores.schema import MYSQL_TABLE_OPTIONS
from tjobs.stores.schema_slo import (
    SLO_COUNT_COLUMNS,
    SLO_HOURS_INDEXES,
    SLO_HOURS_TABLE,
    SLO_LATENESS_COLUMNS,
    slo_hours_schema_items,
    slo_hours_table,
    slo_minutes_table,
)

_OPTIONS: dict[str, Any] = dict(MYSQL_TABLE_OPTIONS)

revision = "0013_slo_hours"
down_revision = "0012_flow_attempt_log"
branch_labels = None
depends_on = None
ONLINE = False  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "fills slo_hours from a copy of slo_minutes that older nodes' later minutes miss"


def upgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if not holds_apps:
        return
    op.create_table(SLO_HOURS_TABLE, *slo_hours_schema_items(), **_OPTIONS)
    for name, columns in SLO_HOURS_INDEXES:
        op.create_index(name, SLO_HOURS_TABLE, columns)
    metadata = MetaData()
    minutes, hours = slo_minutes_table(metadata), slo_hours_table(metadata)
    summed = (*SLO_COUNT_COLUMNS, *SLO_LATENESS_COLUMNS)
    hour = (minutes.c.minute // 60).label("hour")  # minutes are positive: integer division is the floor
    by_hour = select(
        minutes.c.app_id, hour, minutes.c.node_id, *(func.sum(minutes.c[name]) for name in summed)
    ).group_by(minutes.c.app_id, hour, minutes.c.node_id)
    op.execute(insert(hours).from_select(["app_id", "hour", "node_id", *summed], by_hour))


def downgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if holds_apps:
        op.drop_table(SLO_HOURS_TABLE)
