"""The calendars table (:class:`tjobs.stores.contracts.calendars.CalendarRecords`), in the first logical
database only, beside ``apps``: one row per app and calendar name, its rules a JSON text, its
``version`` moved by every write (migration 0018)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, MetaData, PrimaryKeyConstraint, String, Table, Text
from sqlalchemy.schema import SchemaItem

from tjobs.stores.schema import _table

CALENDARS_TABLE = "calendars"


def calendars_schema_items() -> list[SchemaItem]:
    return [
        Column("app_id", String(64), nullable=False),
        Column("name", String(64), nullable=False),
        Column("rules", Text, nullable=False),
        Column("version", BigInteger, nullable=False),
        Column("created_at_ms", BigInteger, nullable=False),
        Column("updated_at_ms", BigInteger, nullable=False),
        PrimaryKeyConstraint("app_id", "name"),
    ]


def calendars_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, CALENDARS_TABLE, schema, calendars_schema_items(), [])
