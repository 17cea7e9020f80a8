"""The SQL store's audit log (:class:`tjobs.stores.contracts.audit.AuditLog`): ``audit_log`` of the
first logical database, over the engines of the :class:`tjobs.stores.sqlalchemy.SQLAlchemyTaskStore` it
is given (no pool of its own). An entry of no app is stored with ``app_id`` ``""``; the documents as
JSON texts. A purge selects the oldest ids first, then deletes those (SQLite has no ``DELETE ... LIMIT``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import MetaData, delete, insert, select

from tjobs.stores.contracts.audit import AuditEntry, AuditLog, AuditQuery
from tjobs.stores.schema import dumps, loads
from tjobs.stores.schema_audit import audit_log_table
from tjobs.stores.sql.apps_records import AppsDatabaseRecords

if TYPE_CHECKING:
    from sqlalchemy.sql import Select


_METADATA = MetaData()
AUDIT = audit_log_table(_METADATA)  # unqualified: the apps database's options point it there


def _row(entry: AuditEntry) -> dict[str, Any]:
    return {
        "at_ms": entry.at_ms,
        "actor_kind": entry.actor_kind,
        "actor_name": entry.actor_name,
        "app_id": entry.app_id or "",
        "action": entry.action,
        "object_id": entry.object_id,
        "before_json": dumps(entry.before),
        "after_json": dumps(entry.after),
        "source": entry.source,
        "via": entry.via,
        "request_id": entry.request_id,
    }


def _entry(row: Mapping[Any, Any]) -> AuditEntry:
    return AuditEntry(
        at_ms=int(row["at_ms"]),
        actor_kind=row["actor_kind"],
        actor_name=row["actor_name"],
        app_id=row["app_id"] or None,
        action=row["action"],
        object_id=row["object_id"],
        before=loads(row["before_json"]),
        after=loads(row["after_json"]),
        source=row["source"],
        via=row["via"],
        request_id=row["request_id"],
        id=int(row["id"]),
    )


def _filtered(query: AuditQuery) -> Select[Any]:
    columns = AUDIT.c
    statement = select(AUDIT).order_by(columns.id.desc()).limit(query.limit)
    for value, condition in (
        (query.app_id, lambda v: columns.app_id == v),
        (query.actor, lambda v: columns.actor_name == v),
        (query.action_prefix, lambda v: columns.action.startswith(v, autoescape=True)),
        (query.since_ms, lambda v: columns.at_ms >= v),
        (query.until_ms, lambda v: columns.at_ms < v),
        (query.object_id, lambda v: columns.object_id == v),
        (query.before_id, lambda v: columns.id < v),
    ):
        if value is not None:
            statement = statement.where(condition(value))
    return statement


class SqlAuditLog(AppsDatabaseRecords, AuditLog):
    async def append_audit(self, entry: AuditEntry) -> int:
        async with self._store._write(self._url) as conn:
            result = await conn.execute(insert(AUDIT).values(**_row(entry)), execution_options=self._options)
        key = result.inserted_primary_key
        if key is None:  # every dialect we run on reports the id of a single-row insert
            raise RuntimeError("the database did not report the audit entry's id")
        return int(key[0])

    async def search_audit(self, query: AuditQuery) -> list[AuditEntry]:
        async with self._store._connect(self._url) as conn:
            rows = (await conn.execute(_filtered(query), execution_options=self._options)).mappings().all()
        return [_entry(row) for row in rows]

    async def purge_audit(self, before_ms: int, limit: int) -> int:
        oldest = select(AUDIT.c.id).where(AUDIT.c.at_ms < before_ms).order_by(AUDIT.c.id).limit(limit)
        async with self._store._write(self._url) as conn:
            ids = list((await conn.execute(oldest, execution_options=self._options)).scalars())
            if ids:
                await conn.execute(delete(AUDIT).where(AUDIT.c.id.in_(ids)), execution_options=self._options)
        return len(ids)
