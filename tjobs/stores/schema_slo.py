"""The service-level tables (:class:`tjobs.stores.contracts.ServiceLevels`, :mod:`tjobs.stores.sql_slo`), in
the first logical database only, beside ``apps``: ``slo_minutes`` (per app, minute and node, what that
node's fires and flows came to) and ``slo_hours`` (the same sums per hour, migration 0013), one BIGINT
column per count of :class:`tjobs.model.SloCounts`.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, MetaData, PrimaryKeyConstraint, String, Table
from sqlalchemy.schema import SchemaItem

from tjobs.model import SLO_LATENESS_SLOTS
from tjobs.stores.schema import _table

SLO_MINUTES_TABLE = "slo_minutes"
SLO_COUNT_COLUMNS = ("fires", "delivered", "dead", "misses", "throttled")
SLO_LATENESS_COLUMNS = tuple(f"lateness_{slot:02d}" for slot in range(SLO_LATENESS_SLOTS))  # commit lateness
# first attempts, as the receiver sees them: the request written, the answer back (migration 0014)
SLO_SEND_LATENESS_COLUMNS = tuple(f"first_send_lateness_{slot:02d}" for slot in range(SLO_LATENESS_SLOTS))
SLO_ANSWER_LATENESS_COLUMNS = tuple(f"first_answer_lateness_{slot:02d}" for slot in range(SLO_LATENESS_SLOTS))
SLO_SUMMED_COLUMNS = (
    *SLO_COUNT_COLUMNS,
    *SLO_LATENESS_COLUMNS,
    *SLO_SEND_LATENESS_COLUMNS,
    *SLO_ANSWER_LATENESS_COLUMNS,
)
"""Every count column, in the order of :meth:`tjobs.model.SloCounts.values`."""
SLO_MINUTES_INDEXES = [("ix_slo_minutes_minute", ["minute"])]


SLO_HOURS_TABLE = "slo_hours"
SLO_HOURS_INDEXES = [("ix_slo_hours_hour", ["hour"])]


def slo_minutes_schema_items() -> list[SchemaItem]:
    """Per app, minute and node, what that node's fires and flows came to (:class:`tjobs.model.SloCounts`),
    in the first logical database only; every node adds its own rows once a minute and any node sums
    them (:mod:`tjobs.stores.sql_slo`)."""
    return _slo_schema_items("minute")  # epoch ms // 60,000


def slo_hours_schema_items() -> list[SchemaItem]:
    """The same counts per app, hour and node: the sums of that node's 60 minutes, added by the statement
    after the minutes' in the same transaction (migration 0013), so a long window reads whole hours."""
    return _slo_schema_items("hour")  # epoch ms // 3,600,000


def slo_count_column(name: str) -> Column[int]:
    """One count of the service-level tables (zero until a node adds to it)."""
    return Column(name, BigInteger, nullable=False, server_default="0")


def _slo_schema_items(period: str) -> list[SchemaItem]:
    return [
        Column("app_id", String(64), nullable=False),
        Column(period, BigInteger, nullable=False, autoincrement=False),
        Column("node_id", String(128), nullable=False),
        *(slo_count_column(name) for name in SLO_SUMMED_COLUMNS),
        PrimaryKeyConstraint("app_id", period, "node_id"),
    ]


def slo_minutes_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, SLO_MINUTES_TABLE, schema, slo_minutes_schema_items(), SLO_MINUTES_INDEXES)


def slo_hours_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, SLO_HOURS_TABLE, schema, slo_hours_schema_items(), SLO_HOURS_INDEXES)
