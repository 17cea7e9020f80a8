"""The shard-map fence on the store's other writes: edits, deletes, manual flows, re-drives, the
compensator's leases and purges (MariaDB).

The fire transaction and the registrations pass the fence (:mod:`tjobs.stores.shard_fence`) in a
round trip they send anyway; so do these. :func:`execute_fenced` sends the fence statement and the
transaction's first statement as one multi-statement on the raw asyncmy connection of the
SQLAlchemy transaction: the fence fails the round trip (error 1242) before the statement runs when a
logical database admits only a later epoch, and otherwise holds its rows' share locks to COMMIT, so
whatever the transaction writes afterwards is covered too (a mover's fence ``UPDATE`` waits for it).

The statement is a SQLAlchemy Core statement over the shard tables, compiled here with the
database's schema and its ``IN`` lists rendered; those tables' columns are integers and strings,
which the driver takes as they are (no bind processing is needed or done). Rows come back as the
driver returns them, as :class:`StatementResult`, which SQLite's path (no fence: nothing moves
between its files) builds from SQLAlchemy's result too, so callers read both alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import CursorResult, Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from tjobs.stores.shard_fence import fence_statement
from tjobs.stores.sql_layout import DatabaseHome


@dataclass(frozen=True, slots=True)
class StatementResult:
    """What a statement returned: its affected-row count and, for a ``SELECT``, its rows."""

    rowcount: int
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    @classmethod
    def of(cls, result: CursorResult[Any]) -> StatementResult:
        if not result.returns_rows:
            return cls(int(result.rowcount), (), [])
        return cls(int(result.rowcount), tuple(result.keys()), [tuple(row) for row in result])

    def mappings(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]

    def scalars(self) -> list[Any]:
        return [row[0] for row in self.rows]


_COMPILED_MAX = 1024  # statement shapes kept compiled (a node writes a few dozen; the cache is emptied past it)
_compiled: dict[tuple[Any, ...], SQLCompiler] = {}


def compiled_sql(statement: Executable, dialect: Dialect, schema_map: dict[Any, Any] | None) -> tuple[str, list[Any]]:
    """``statement``'s SQL for ``dialect`` under ``schema_map`` and its parameters in order. A statement
    of a shape compiled before (SQLAlchemy's cache key: the statement less its values) takes that
    compilation with its own values, as the engine's compiled cache does (issue 30: compiling a run's
    write was a tenth of a report's node CPU); one with an ``IN`` list, whose SQL follows its length,
    is compiled every time."""
    assert isinstance(statement, ClauseElement)
    cache_key = statement._generate_cache_key()
    key = None
    if cache_key is not None:
        key = (cache_key.key, dialect.name, dialect.server_version_info, tuple((schema_map or {}).items()))
        cached = _compiled.get(key)
        if cached is not None:
            values = cached.construct_params(extracted_parameters=cache_key.bindparams)
            return cached.string, [values[name] for name in cached.positiontup or ()]
    compiled = statement.compile(
        dialect=dialect,
        cache_key=cache_key,
        schema_translate_map=schema_map,
        render_schema_translate=True,
        compile_kwargs={"render_postcompile": True},
    )
    assert isinstance(compiled, SQLCompiler)
    if key is not None and not any(bind.expanding or bind.literal_execute for bind in compiled.binds.values()):
        if len(_compiled) >= _COMPILED_MAX:
            _compiled.clear()
        _compiled[key] = compiled
    values = compiled.params
    return compiled.string, [values[name] for name in compiled.positiontup or ()]


async def execute_fenced(
    conn: AsyncConnection,
    databases: Sequence[DatabaseHome],
    epoch: int,
    statement: Executable,
    options: dict[str, Any],
) -> StatementResult:
    """Pass the fence of ``databases`` under ``epoch`` and run ``statement`` on ``conn`` (a MariaDB
    transaction), in one round trip; error 1242 (nothing run) when a fence admits only a later epoch."""
    sql, parameters = compiled_sql(statement, conn.dialect, options.get("schema_translate_map"))
    fence_sql, fence_params = fence_statement(databases, epoch)
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    cursor = driver.cursor()
    try:
        await cursor.execute(f"{fence_sql}; {sql}", (*fence_params, *parameters))
        await cursor.fetchall()  # the fence's rows: one per database
        await cursor.nextset()
        rows = [tuple(row) for row in await cursor.fetchall()] if cursor.description else []
        columns = tuple(column[0] for column in cursor.description) if cursor.description else ()
        result = StatementResult(int(cursor.rowcount), columns, rows)
        while await cursor.nextset():
            pass
        return result
    finally:
        await cursor.close()
