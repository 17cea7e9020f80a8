"""The audit log's table (:class:`tjobs.stores.contracts.audit.AuditLog`), in the first logical database
only, beside ``apps``: one row per change made through the API, the console or the CLI, appended and
never updated; a retention pass deletes the rows past their time (migration 0017).

``app_id`` is ``""`` for a change that belongs to no app (an admin's cluster-wide change); ``before``
and ``after`` are JSON texts (``"null"`` for none), already redacted and capped by the service.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, Text
from sqlalchemy.schema import SchemaItem

from tjobs.stores.schema import _table

AUDIT_LOG_TABLE = "audit_log"
AUDIT_LOG_INDEXES = [
    ("audit_log_app", ["app_id", "id"]),
    ("audit_log_object", ["object_id", "id"]),
    ("audit_log_at", ["at_ms"]),
]


def audit_log_schema_items() -> list[SchemaItem]:
    return [
        Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
        Column("at_ms", BigInteger, nullable=False),
        Column("actor_kind", String(16), nullable=False),
        Column("actor_name", String(128), nullable=False),
        Column("app_id", String(64), nullable=False),
        Column("action", String(64), nullable=False),
        Column("object_id", String(200), nullable=False),
        Column("before_json", Text, nullable=False),
        Column("after_json", Text, nullable=False),
        Column("source", String(64), nullable=False),
        Column("via", String(16), nullable=False),
        Column("request_id", String(64), nullable=False),
    ]


def audit_log_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, AUDIT_LOG_TABLE, schema, audit_log_schema_items(), AUDIT_LOG_INDEXES)
