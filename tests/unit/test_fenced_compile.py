"""The fenced writes' compiled statements (tjobs.stores.sql_fenced.compiled_sql): a statement of a shape
compiled before is rendered from that compilation with its own values, exactly as a fresh compilation
renders it; an IN list, whose SQL follows its length, is compiled every time."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, func, select, update
from sqlalchemy.dialects import mysql
from sqlalchemy.sql.compiler import SQLCompiler

from tjobs.stores import sql_fenced
from tjobs.stores.sql_fenced import compiled_sql

_flows = Table(
    "flows",
    MetaData(),
    Column("task_id", Integer),
    Column("status", String(16)),
    Column("attempts", Integer),
    Column("last_error", String(100)),
    Column("run_log", String(100)),
)
DIALECT = mysql.dialect(paramstyle="format")


def _fresh(statement: Any, schema_map: dict[Any, Any]) -> tuple[str, list[Any]]:
    compiled = statement.compile(
        dialect=DIALECT,
        schema_translate_map=schema_map,
        render_schema_translate=True,
        compile_kwargs={"render_postcompile": True},
    )
    assert isinstance(compiled, SQLCompiler)
    return compiled.string, [compiled.params[name] for name in compiled.positiontup or ()]


def _write(task_id: int, expected: str, status: str, error: str | None) -> Any:
    c = _flows.c
    return (
        update(_flows)
        .where(c.task_id == task_id, c.status == expected, c.attempts == task_id % 3)
        .values(status=status, last_error=error, run_log=func.coalesce(c.run_log, "").concat(f"line {task_id}\n"))
    )


def test_a_shape_compiled_before_renders_each_statements_own_values() -> None:
    sql_fenced._compiled.clear()
    shards = [{None: "tjobs_0"}, {None: "tjobs_1"}]
    for task_id in range(1, 7):
        for schema_map in shards:
            statement = _write(task_id, "running", f"s{task_id}", None if task_id % 2 else f"e{task_id}")
            assert compiled_sql(statement, DIALECT, schema_map) == _fresh(statement, schema_map)
    assert "tjobs_1" in compiled_sql(_write(9, "running", "done", None), DIALECT, shards[1])[0]
    assert 0 < len(sql_fenced._compiled) <= 4  # a shape (with and without an error) per database


def test_an_in_list_is_compiled_for_its_own_length() -> None:
    sql_fenced._compiled.clear()
    for ids in ([1], [1, 2, 3], [4, 5], list(range(10))):
        statement = select(_flows.c.task_id).where(_flows.c.task_id.in_(ids), _flows.c.status == "pending")
        sql, parameters = compiled_sql(statement, DIALECT, {None: "tjobs_0"})
        assert (sql, parameters) == _fresh(statement, {None: "tjobs_0"})
        assert parameters == [*ids, "pending"]
    assert sql_fenced._compiled == {}
