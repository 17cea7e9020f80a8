"""The one schema definition (SQLAlchemy Core) for SQLite and MariaDB, and the row ↔ record mapping.

Per shard, in its logical database: ``tasks_TT``, ``flows_TT`` and ``task_targets_TT`` (which tasks
name which target). In the first logical database only: ``apps`` and ``targets``, the layout, shard map
and fence, and the DB-poll hot tier's change log; the other tables there are defined by role beside this
module (``schema_slo``, ``schema_alerts``, ``schema_accounts``, ``schema_audit``, ``schema_calendars``,
``schema_operator_jobs``) on its :func:`_table`. Instants are BIGINT epoch milliseconds; JSON documents
are stored as text (``orjson``; a flow's run, answers, attempt log and routes:
:mod:`tjobs.stores.flow_documents`). On MariaDB every table is InnoDB, ``utf8mb4`` with the binary
collation, so that idempotency keys compare exactly as they do in SQLite and in memory (``"Order-1"``
and ``"order-1"`` are two keys).

Index names carry the table name because SQLite index names are per database, not per table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.schema import SchemaItem
from sqlalchemy.types import TypeEngine

from tjobs.model import (
    App,
    DeliveryMode,
    Flow,
    FlowKind,
    FlowStatus,
    MisfirePolicy,
    Task,
    TaskChildren,
    TaskStatus,
)
from tjobs.specs import callback_from_text, callback_to_text, schedule_from_text, schedule_to_text
from tjobs.stores.flow_documents import (
    MAX_ERROR_CHARS,
    answers_from_text,
    attempt_log_from_text,
    routes_from_text,
    run_from_text,
)
from tjobs.targets.codec import (
    credentials_from_json,
    retry_from_json,
    retry_to_json,
    settings_from_json,
    settings_to_json,
)
from tjobs.targets.model import Protocol, Target

APPS_TABLE = "apps"
LAYOUT_TABLE = "tjobs_layout"
SHARD_MAP_TABLE = "tjobs_shard_map"
SHARD_FENCE_TABLE = "tjobs_fence"
HOT_CHANGES_TABLE = "hot_changes"
TARGETS_TABLE = "targets"
TASK_COUNTS_TABLE = "task_counts"
TARGET_NAME_CHARS = 64

MYSQL_TABLE_OPTIONS: dict[str, str] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
    # No background re-sampling of index statistics as rows change: saving them stalled every
    # statement that opened a table for 1-4 s at 2,000 fires/s (revision 0010 explains).
    "mysql_stats_auto_recalc": "0",
}


def _big_text() -> TypeEngine[str]:
    """TEXT on SQLite, MEDIUMTEXT (16 MiB) on MariaDB: a 64 KiB payload plus its JSON envelope."""
    return Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def tasks_schema_items(table_name: str) -> list[SchemaItem]:
    return [
        # minted by TaskIdGenerator; INTEGER on SQLite makes it the rowid (same 64 bits)
        Column("id", BigInteger().with_variant(Integer(), "sqlite"), nullable=False, autoincrement=False),
        Column("app_id", String(64), nullable=False),
        Column("name", String(200), nullable=False),
        Column("idem_key", String(200), nullable=True),  # NULLs never collide in a UNIQUE index
        Column("status", String(16), nullable=False),
        Column("next_run_at", BigInteger, nullable=True),
        Column("version", Integer, nullable=False),
        Column("fire_count", Integer, nullable=False),
        Column("schedule", Text, nullable=False),
        Column("callback", _big_text(), nullable=False),
        Column("payload", _big_text(), nullable=False),
        Column("misfire_policy", String(16), nullable=False),
        Column("delivery", String(16), nullable=False),
        Column("created_at", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
        PrimaryKeyConstraint("id"),  # MariaDB ignores (and warns about) primary key names
        UniqueConstraint("app_id", "idem_key", name=f"{table_name}_app_key"),
    ]


def task_revision_column() -> Column[int]:
    """``revision``: bumped by the owner's edits only (``version`` also moves on fires); added by
    migration 0002, so not part of :func:`tasks_schema_items` (the initial revision's columns)."""
    return Column("revision", Integer, nullable=False, server_default="1")


def task_children_column() -> Column[str]:
    """``children``: the tasks a task's flows trigger when they end, as JSON ``{"on_success": [id, ...],
    "on_failure": [id, ...]}`` (:func:`children_to_text`); NULL for a task naming none. Added by migration
    0023, so not part of :func:`tasks_schema_items` (the initial revision's columns)."""
    return Column("children", Text, nullable=True)


def children_to_text(children: TaskChildren | None) -> str | None:
    if not children:
        return None
    return orjson.dumps({"on_success": children.on_success, "on_failure": children.on_failure}).decode()


def children_from_text(text: str | None) -> TaskChildren | None:
    if text is None:
        return None
    document = orjson.loads(text)
    return TaskChildren(tuple(document["on_success"]), tuple(document["on_failure"]))


def flow_routes_column() -> Column[str]:
    """``routes``: a pool flow's route log as JSON, ``[[attempt, destination, executor id], ...]``
    (:mod:`tjobs.delivery.pool_dispatcher`), NULL for every other flow; added by migration 0009, so not part
    of :func:`flows_schema_items` (the initial revision's columns) nor of :data:`FLOW_COLUMNS` (a fire
    inserts none)."""
    return Column("routes", Text, nullable=True)


def flow_payload_column() -> Column[str]:
    """``payload``: a manual flow's own payload as JSON text (``POST /v1/tasks/{id}/trigger`` with a
    ``payload``), sent instead of the task's on every attempt of that flow; NULL for every other flow (the
    task's payload). Added by migration 0011, so not part of :func:`flows_schema_items` nor of
    :data:`FLOW_COLUMNS` (a fire inserts none)."""
    return Column("payload", _big_text(), nullable=True)


def flow_attempt_log_column() -> Column[str]:
    """``attempt_log``: a flow's attempt history as JSON, ``{"total": n, "records": [[attempt, started_at,
    duration_ms, status_code, error, destination, executor], ...]}`` (the newest
    :data:`tjobs.model.MAX_ATTEMPT_RECORDS`, oldest first), written whole by the same ``UPDATE`` that
    records the outcome; NULL before the first attempt. Added by migration 0012, so not part of
    :func:`flows_schema_items` nor of :data:`FLOW_COLUMNS` (a fire inserts none)."""
    return Column("attempt_log", _big_text(), nullable=True)


def flow_answers_column() -> Column[str]:
    """``answers``: the newest sends' answers as JSON, ``[[attempt, destination, status_code, [[name,
    value], ...], body, body_bytes, task_revision], ...]`` (at most :data:`tjobs.model.MAX_ANSWER_RECORDS`,
    oldest first; headers masked and capped, the body's first :data:`tjobs.model.ANSWER_BODY_BYTES`:
    :mod:`tjobs.delivery.answers`), written whole by the ``UPDATE`` that records each outcome, like
    ``attempt_log``; NULL before the first answer. Added by migration 0020, so not part of
    :func:`flows_schema_items` nor of :data:`FLOW_COLUMNS` (a fire inserts none)."""
    return Column("answers", _big_text(), nullable=True)


def flow_run_columns() -> list[Column[Any]]:
    """A flow's run (README "Job runs"): ``run``, its newest run as JSON
    (:func:`~tjobs.stores.flow_documents.run_to_text`; NULL before a target accepted an attempt as a
    run), written by the outcome that started it and by each report; ``run_log``, the runs' log lines,
    one JSON object a line, appended in place (:mod:`tjobs.service.run_log`); ``run_log_lines``, how many
    lines ``run_log`` holds (NULL: none), the guard of every append. Added by migration 0021, so not part
    of :func:`flows_schema_items` nor of :data:`FLOW_COLUMNS` (a fire inserts none)."""
    return [
        Column("run", _big_text(), nullable=True),
        Column("run_log", _big_text(), nullable=True),
        Column("run_log_lines", Integer, nullable=True),
    ]


def tasks_indexes(table_name: str) -> list[tuple[str, list[str]]]:
    return [
        (f"{table_name}_due", ["status", "next_run_at"]),  # the cycle load: a range scan
        (f"{table_name}_app", ["app_id", "id"]),  # listing an app's tasks
    ]


SCHEDULE_KIND_COLUMN = "schedule_kind"
"""A virtual column of ``tasks_TT`` (migration 0006_search): the kind stored first in ``schedule``'s
JSON, computed by the database and indexed for searching tasks by kind; never written or read back."""

SCHEDULE_KIND_EXPRESSION = {"mysql": "JSON_VALUE(schedule, '$.kind')", "sqlite": "json_extract(schedule, '$.kind')"}


def search_task_indexes(table_name: str) -> list[tuple[str, list[str]]]:
    """The task search's ordered index ranges (migration 0006_search; :mod:`tjobs.stores.sql_search`)."""
    return [
        (f"{table_name}_app_name", ["app_id", "name", "id"]),
        (f"{table_name}_app_status", ["app_id", "status", "id"]),
        (f"{table_name}_app_kind", ["app_id", SCHEDULE_KIND_COLUMN, "id"]),
    ]


def search_flow_indexes(table_name: str) -> list[tuple[str, list[str]]]:
    """The flow search's ordered index ranges, newest first (migration 0006_search)."""
    return [
        (f"{table_name}_app_at", ["app_id", "scheduled_at", "task_id"]),
        (f"{table_name}_app_status_at", ["app_id", "status", "scheduled_at", "task_id"]),
    ]


def purge_flow_indexes(table_name: str) -> list[tuple[str, list[str]]]:
    """Retention's read of the flows old enough to purge, oldest first (migration 0025): one probe when
    none is; written once per flow, at the table's newest instants, never moved (``scheduled_at`` is part
    of the key)."""
    return [(f"{table_name}_at", ["scheduled_at"])]


COMPLETED_AT_COLUMN = "completed_at"
"""A virtual column of ``tasks_TT`` on MariaDB (migration 0026): a completed task's ``updated_at`` (when
it completed, unless edited since), NULL for every other task; never written or read back. Its index is
retention's read of the completed tasks old enough to purge, oldest first. A fire of an active task
leaves it NULL, so the index is not written on the fire path (InnoDB updates a secondary index only when
one of its values changes). SQLite has partial indexes instead: ``tasks_TT_done`` indexes ``updated_at``
of the rows ``WHERE status = 'completed'``."""

COMPLETED_AT_EXPRESSION = "CASE WHEN status = 'completed' THEN updated_at END"


def purge_task_indexes(table_name: str, dialect: str) -> list[tuple[str, list[str]]]:
    """Retention's read of the completed tasks old enough to purge, oldest first (migration 0026): one
    probe when none is. On MariaDB the index of :data:`COMPLETED_AT_COLUMN`; on SQLite ``updated_at``
    of the completed rows only (a partial index: ``WHERE status = 'completed'``, which the read repeats)."""
    return [(f"{table_name}_done", [COMPLETED_AT_COLUMN if dialect == "mysql" else "updated_at"])]


def flows_schema_items(table_name: str) -> list[SchemaItem]:
    return [
        Column("task_id", BigInteger, nullable=False, autoincrement=False),
        Column("scheduled_at", BigInteger, nullable=False, autoincrement=False),
        Column("app_id", String(64), nullable=False),
        Column("kind", String(16), nullable=False),
        Column("status", String(16), nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("next_attempt_at", BigInteger, nullable=True),
        Column("missed", Integer, nullable=False),
        Column("last_status_code", Integer, nullable=True),
        Column("last_error", String(MAX_ERROR_CHARS), nullable=True),
        Column("created_at", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
        # The primary key IS the UNIQUE(task_id, scheduled_at) of invariant 2 (docs/design.md).
        PrimaryKeyConstraint("task_id", "scheduled_at"),
    ]


def flows_indexes(table_name: str) -> list[tuple[str, list[str]]]:
    return [
        (f"{table_name}_retry", ["status", "next_attempt_at"]),  # the compensator
        (f"{table_name}_app_status", ["app_id", "status", "task_id"]),  # dead letters per app
    ]


def apps_schema_items() -> list[SchemaItem]:
    return [
        Column("id", String(64), nullable=False),
        Column("name", String(200), nullable=False),
        Column("api_key_hash", String(128), nullable=False),
        Column("secrets", Text, nullable=False),
        Column("rate_limit_per_s", Double, nullable=False),
        Column("max_concurrency", Integer, nullable=False),
        Column("created_at", BigInteger, nullable=False),
        Column("settings", Text, nullable=False),
        PrimaryKeyConstraint("id"),
        UniqueConstraint("api_key_hash", name="apps_key_hash"),
    ]


def layout_schema_items() -> list[SchemaItem]:
    """What the data was laid out for (topology, database prefix, servers): one row per fact, in
    the first logical database only. See :mod:`tjobs.stores.layout_record`."""
    return [
        Column("name", String(64), nullable=False),
        Column("value", String(200), nullable=False),
        PrimaryKeyConstraint("name"),
    ]


def shard_map_schema_items() -> list[SchemaItem]:
    """The embedded mode's shard map (:mod:`sharding.shard_map`): one row, in the first logical
    database only; a cluster keeps its map in etcd instead. See :mod:`tjobs.stores.shard_fence`."""
    return [
        Column("id", Integer, nullable=False, autoincrement=False),
        Column("epoch", BigInteger, nullable=False),
        Column("document", Text, nullable=False),
        PrimaryKeyConstraint("id"),
    ]


def shard_fence_schema_items() -> list[SchemaItem]:
    """One row in every logical database: the lowest shard-map epoch a writer must hold to write to
    this copy of it (``RETIRED`` once it moved away). See :mod:`tjobs.stores.shard_fence`."""
    return [
        Column("id", Integer, nullable=False, autoincrement=False),
        Column("epoch", BigInteger, nullable=False),
        PrimaryKeyConstraint("id"),
    ]


def hot_changes_schema_items() -> list[SchemaItem]:
    """The DB-poll hot tier's append-only change log (:mod:`tjobs.hot_tier.dbpoll`), in the first
    logical database only."""
    return [
        Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
        Column("task_id", BigInteger, nullable=False),
        Column("app_id", String(64), nullable=False),
        Column("next_run_at_ms", BigInteger, nullable=True),
        Column("version", BigInteger, nullable=False),
        Column("origin", String(128), nullable=False),
        Column("created_at_ms", BigInteger, nullable=False),
    ]


HOT_CHANGES_INDEXES = [("ix_hot_changes_created", ["created_at_ms"])]


def targets_schema_items() -> list[SchemaItem]:
    """An app's named delivery targets (:mod:`tjobs.targets`), in the first logical database only,
    beside ``apps``. ``settings``, ``retry`` and ``credentials`` are JSON documents."""
    return [
        Column("app_id", String(64), nullable=False),
        Column("name", String(TARGET_NAME_CHARS), nullable=False),
        Column("protocol", String(16), nullable=False),
        Column("version", Integer, nullable=False),
        Column("settings", Text, nullable=False),
        Column("retry", Text, nullable=False),
        Column("credentials", Text, nullable=False),
        Column("created_at", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
        PrimaryKeyConstraint("app_id", "name"),
    ]


def task_targets_table_name(table: int) -> str:
    return f"task_targets_{table:02d}"


def task_targets_schema_items(table_name: str) -> list[SchemaItem]:
    """Per shard, beside ``tasks_TT``: one row per (target, task) naming it, written in the task's own
    transaction, so counting the tasks that name a target reads only that target's rows."""
    return [
        Column("app_id", String(64), nullable=False),
        Column("target", String(TARGET_NAME_CHARS), nullable=False),
        Column("task_id", BigInteger, nullable=False, autoincrement=False),
        PrimaryKeyConstraint("app_id", "target", "task_id"),
    ]


def task_targets_indexes(table_name: str) -> list[tuple[str, list[str]]]:
    return [(f"{table_name}_task", ["task_id"])]  # a task's rows, when it is edited or deleted


def task_counts_schema_items() -> list[SchemaItem]:
    """In every logical database: how many tasks of an app are in a status in one of its shard tables
    (``table_index``, 0 .. tables per database - 1), changed by deltas in the transaction of every write
    that creates, deletes or changes the status of a task (:mod:`tjobs.stores.sql_task_counts`). The
    key leads with the app, so an app's counts are one index range; the table index in the key spreads
    one app's creates over as many rows as its tasks spread over tables."""
    return [
        Column("app_id", String(64), nullable=False),
        Column("status", String(16), nullable=False),
        Column("table_index", Integer, nullable=False, autoincrement=False),
        Column("n", BigInteger, nullable=False),
        PrimaryKeyConstraint("app_id", "status", "table_index"),
    ]


def _table(
    metadata: MetaData,
    name: str,
    schema: str | None,
    items: list[SchemaItem],
    indexes: list[tuple[str, list[str]]],
) -> Table:
    table = Table(
        name,
        metadata,
        *items,
        schema=schema,
        mysql_engine=MYSQL_TABLE_OPTIONS["mysql_engine"],
        mysql_charset=MYSQL_TABLE_OPTIONS["mysql_charset"],
        mysql_collate=MYSQL_TABLE_OPTIONS["mysql_collate"],
        mysql_stats_auto_recalc=MYSQL_TABLE_OPTIONS["mysql_stats_auto_recalc"],
    )
    for index_name, columns in indexes:
        Index(index_name, *(table.c[c] for c in columns))
    return table


def tasks_table(metadata: MetaData, name: str, schema: str | None = None) -> Table:
    items = [*tasks_schema_items(name), task_revision_column(), task_children_column()]
    return _table(metadata, name, schema, items, tasks_indexes(name))


def flows_table(metadata: MetaData, name: str, schema: str | None = None) -> Table:
    items = [
        *flows_schema_items(name),
        flow_routes_column(),
        flow_payload_column(),
        flow_attempt_log_column(),
        flow_answers_column(),
        *flow_run_columns(),
    ]
    return _table(metadata, name, schema, items, flows_indexes(name))


def apps_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, APPS_TABLE, schema, apps_schema_items(), [])


def layout_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, LAYOUT_TABLE, schema, layout_schema_items(), [])


def hot_changes_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, HOT_CHANGES_TABLE, schema, hot_changes_schema_items(), HOT_CHANGES_INDEXES)


def targets_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, TARGETS_TABLE, schema, targets_schema_items(), [])


def task_targets_table(metadata: MetaData, name: str, schema: str | None = None) -> Table:
    return _table(metadata, name, schema, task_targets_schema_items(name), task_targets_indexes(name))


def task_counts_table(metadata: MetaData, schema: str | None = None) -> Table:
    return _table(metadata, TASK_COUNTS_TABLE, schema, task_counts_schema_items(), [])


# ---- rows ↔ records ----------------------------------------------------------------------------


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def loads(text: str | bytes) -> Any:
    return orjson.loads(text)


def task_to_row(task: Task) -> dict[str, Any]:
    return {
        "id": task.id,
        "app_id": task.app_id,
        "name": task.name,
        "idem_key": task.key,
        "status": task.status.value,
        "next_run_at": task.next_run_at_ms,
        "version": task.version,
        "fire_count": task.fire_count,
        "schedule": schedule_to_text(task.schedule),
        "callback": callback_to_text(task.callback),
        "payload": dumps(task.payload),
        "misfire_policy": task.misfire_policy.value,
        "delivery": task.delivery.value,
        "created_at": task.created_at_ms,
        "updated_at": task.updated_at_ms,
        "revision": task.revision,
        "children": children_to_text(task.children),
    }


TASK_COLUMNS: tuple[str, ...] = (
    "id",
    "app_id",
    "name",
    "idem_key",
    "status",
    "next_run_at",
    "version",
    "fire_count",
    "schedule",
    "callback",
    "payload",
    "misfire_policy",
    "delivery",
    "created_at",
    "updated_at",
    "revision",
    "children",
)


def task_from_row(row: Mapping[Any, Any]) -> Task:
    return Task(
        id=int(row["id"]),
        app_id=row["app_id"],
        name=row["name"],
        key=row["idem_key"],
        schedule=schedule_from_text(row["schedule"]),
        callback=callback_from_text(row["callback"]),
        payload=loads(row["payload"]),
        misfire_policy=MisfirePolicy(row["misfire_policy"]),
        delivery=DeliveryMode(row["delivery"]),
        status=TaskStatus(row["status"]),
        next_run_at_ms=None if row["next_run_at"] is None else int(row["next_run_at"]),
        version=int(row["version"]),
        fire_count=int(row["fire_count"]),
        created_at_ms=int(row["created_at"]),
        updated_at_ms=int(row["updated_at"]),
        revision=int(row["revision"]),
        children=children_from_text(row["children"]),
    )


FLOW_COLUMNS: tuple[str, ...] = (
    "task_id",
    "scheduled_at",
    "app_id",
    "kind",
    "status",
    "attempts",
    "next_attempt_at",
    "missed",
    "last_status_code",
    "last_error",
    "created_at",
    "updated_at",
)


def clip_error(text: str | None) -> str | None:
    return None if text is None else text[:MAX_ERROR_CHARS]


def flow_to_row(flow: Flow) -> dict[str, Any]:
    return {
        "task_id": flow.task_id,
        "scheduled_at": flow.scheduled_at_ms,
        "app_id": flow.app_id,
        "kind": flow.kind.value,
        "status": flow.status.value,
        "attempts": flow.attempts,
        "next_attempt_at": flow.next_attempt_at_ms,
        "missed": flow.missed,
        "last_status_code": flow.last_status_code,
        "last_error": clip_error(flow.last_error),
        "created_at": flow.created_at_ms,
        "updated_at": flow.updated_at_ms,
        **({"payload": flow.payload_json} if flow.payload_json is not None else {}),
    }


def flow_from_row(row: Mapping[Any, Any]) -> Flow:
    return Flow(
        task_id=int(row["task_id"]),
        scheduled_at_ms=int(row["scheduled_at"]),
        app_id=row["app_id"],
        kind=FlowKind(row["kind"]),
        status=FlowStatus(row["status"]),
        attempts=int(row["attempts"]),
        next_attempt_at_ms=None if row["next_attempt_at"] is None else int(row["next_attempt_at"]),
        created_at_ms=int(row["created_at"]),
        updated_at_ms=int(row["updated_at"]),
        missed=int(row["missed"]),
        last_status_code=None if row["last_status_code"] is None else int(row["last_status_code"]),
        last_error=row["last_error"],
        routes=routes_from_text(row.get("routes")),
        payload_json=row.get("payload"),
        attempt_log=attempt_log_from_text(row.get("attempt_log")),
        answers=answers_from_text(row.get("answers")),
        run=run_from_text(row.get("run")),
        run_log=row.get("run_log"),
        run_log_lines=row.get("run_log_lines") or 0,
    )


def app_to_row(app: App) -> dict[str, Any]:
    return {
        "id": app.id,
        "name": app.name,
        "api_key_hash": app.api_key_hash,
        "secrets": dumps(app.secrets),
        "rate_limit_per_s": app.rate_limit_per_s,
        "max_concurrency": app.max_concurrency,
        "created_at": app.created_at_ms,
        "settings": dumps(app.settings),
    }


def app_from_row(row: Mapping[Any, Any]) -> App:
    return App(
        id=row["id"],
        name=row["name"],
        api_key_hash=row["api_key_hash"],
        secrets=list(loads(row["secrets"])),
        rate_limit_per_s=float(row["rate_limit_per_s"]),
        max_concurrency=int(row["max_concurrency"]),
        created_at_ms=int(row["created_at"]),
        settings=dict(loads(row["settings"])),
    )


def target_to_row(target: Target) -> dict[str, Any]:
    return {
        "app_id": target.app_id,
        "name": target.name,
        "protocol": target.protocol.value,
        "version": target.version,
        "settings": dumps(settings_to_json(target.settings)),
        "retry": dumps(retry_to_json(target.retry)),
        "credentials": dumps(dict(target.credentials)),
        "created_at": target.created_at_ms,
        "updated_at": target.updated_at_ms,
    }


def target_from_row(row: Mapping[Any, Any]) -> Target:
    protocol = Protocol(row["protocol"])
    return Target(
        app_id=row["app_id"],
        name=row["name"],
        settings=settings_from_json(protocol, loads(row["settings"])),
        version=int(row["version"]),
        retry=retry_from_json(loads(row["retry"])),
        credentials=credentials_from_json(loads(row["credentials"])),
        created_at_ms=int(row["created_at"]),
        updated_at_ms=int(row["updated_at"]),
    )


def task_target_rows(task: Task) -> list[dict[str, Any]]:
    """The ``task_targets_TT`` rows of ``task``: one per target its callback names (none for inline)."""
    return [{"app_id": task.app_id, "target": name, "task_id": task.id} for name in task.callback.targets]
