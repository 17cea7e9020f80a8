"""The alerts' tables (:class:`tjobs.stores.contracts.AlertSettings`, :mod:`tjobs.stores.sql.alerts`), in the
first logical database only, beside ``apps``: ``alert_settings`` (rules and channels) and ``alert_states``
(per rule and subject, firing or resolved; migration 0015).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, MetaData, PrimaryKeyConstraint, String, Table, Text
from sqlalchemy.schema import SchemaItem

from tjobs.stores.schema import _table

ALERT_SETTINGS_TABLE = "alert_settings"
ALERT_STATES_TABLE = "alert_states"


def alert_settings_schema_items() -> list[SchemaItem]:
    """Alert rules and channels (:mod:`tjobs.alerts`), each a JSON ``document``, in the first logical
    database only; ``app_id`` is ``""`` for a global one (migration 0015)."""
    return [
        Column("kind", String(16), nullable=False),
        Column("id", String(64), nullable=False),
        Column("app_id", String(64), nullable=False),
        Column("document", Text, nullable=False),
        Column("created_at_ms", BigInteger, nullable=False),
        Column("updated_at_ms", BigInteger, nullable=False),
        PrimaryKeyConstraint("kind", "id"),
    ]


def alert_states_schema_items() -> list[SchemaItem]:
    """Per alert rule and subject: firing or resolved, and when last notified; written by a
    compare-and-set on ``version`` (:class:`tjobs.stores.contracts.AlertSettings`)."""
    return [
        Column("rule_id", String(64), nullable=False),
        Column("subject", String(200), nullable=False),
        Column("app_id", String(64), nullable=False),
        Column("status", String(16), nullable=False),
        Column("since_ms", BigInteger, nullable=False),
        Column("notified_at_ms", BigInteger, nullable=False),
        Column("resolved_at_ms", BigInteger, nullable=True),
        Column("summary", Text, nullable=False),
        Column("extra", Text, nullable=False),
        Column("version", BigInteger, nullable=False),
        PrimaryKeyConstraint("rule_id", "subject"),
    ]


def alert_settings_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, ALERT_SETTINGS_TABLE, schema, alert_settings_schema_items(), [])


def alert_states_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, ALERT_STATES_TABLE, schema, alert_states_schema_items(), [])
