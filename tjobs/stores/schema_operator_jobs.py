"""The operator jobs' table (:class:`tjobs.stores.contracts.operator_jobs.OperatorJobs`), in the first
logical database only, beside ``apps``: one row per job, its ``params``, ``position`` and ``errors`` JSON
texts, ``claims`` the fence of every progress write (migration 0019)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, Integer, MetaData, String, Table, Text
from sqlalchemy.schema import SchemaItem

from tjobs.stores.schema import _table

OPERATOR_JOBS_TABLE = "operator_jobs"
OPERATOR_JOBS_INDEXES = [
    ("operator_jobs_app", ["app_id", "created_at_ms"]),
    ("operator_jobs_state", ["state", "lease_until_ms"]),  # the claim: unfinished jobs whose lease ended
]
JOB_ERROR_CHARS = 500


def operator_jobs_schema_items() -> list[SchemaItem]:
    return [
        Column("id", String(32), primary_key=True),
        Column("kind", String(32), nullable=False),
        Column("app_id", String(64), nullable=False),
        Column("params_json", Text, nullable=False),
        Column("total", BigInteger, nullable=False),
        Column("created_by", String(128), nullable=False),
        Column("created_at_ms", BigInteger, nullable=False),
        Column("updated_at_ms", BigInteger, nullable=False),
        Column("state", String(16), nullable=False),
        Column("processed", BigInteger, nullable=False),
        Column("failed", BigInteger, nullable=False),
        Column("position_json", Text, nullable=False),
        Column("finished_at_ms", BigInteger, nullable=True),
        Column("cancel_requested", Boolean, nullable=False),
        Column("owner", String(128), nullable=True),
        Column("lease_until_ms", BigInteger, nullable=False),
        Column("claims", Integer, nullable=False),
        Column("last_error", String(JOB_ERROR_CHARS), nullable=True),
        Column("errors_json", Text, nullable=False),
    ]


def operator_jobs_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, OPERATOR_JOBS_TABLE, schema, operator_jobs_schema_items(), OPERATOR_JOBS_INDEXES)
