"""Task rows written as literals (:mod:`tjobs.stores.sql_literals`) are the rows asyncmy's parameters make.

Given strings a literal must escape (quotes, backslashes, NUL, CR, LF, Ctrl-Z, ``%`` marks, an injection
attempt, non-ASCII), when MariaDB reads them as :class:`TaskRows` writes them, in the default escape mode
and with ``NO_BACKSLASH_ESCAPES``, then it reads the very strings, and a task's row reads the same values
as its :func:`task_values` through asyncmy's ``%s`` marks; a batch of such tasks inserted through the store
(one round trip or several) reads back equal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import asyncmy
import pytest

from testkit.mariadb_template import fresh_mariadb, release_mariadb
from tests.contract.backends import make_task, mariadb_settings
from tjobs.model import Task, TaskChildren
from tjobs.settings import StorageSettings
from tjobs.specs import CallbackSpec
from tjobs.stores import sql_direct
from tjobs.stores.sql_direct import TASK_ROW, connect_kwargs, task_values
from tjobs.stores.sql_literals import TaskRows
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.mariadb

AWKWARD = [
    "",
    "plain",
    "O'Brien",
    "''",
    "back\\slash",
    "ends with a backslash\\",
    "\\'",
    "\\\\'",
    '"double" quotes',
    "%s %d %% %(name)s",
    "nul\x00byte",
    "line\nfeed\rreturn",
    "ctrl-z\x1a",
    "tab\tbell\x07",
    "'; DROP TABLE tasks; --",
    "\\'; SELECT 1; --",
    "héllo ✓ 🎉 中文",
]


def awkward_task(index: int, text: str) -> Task:
    task = make_task(name=f"n{index}-{text}"[:200], key=f"k{index}-{text}"[:200] or None)
    return replace(
        task,
        payload={"text": text, "list": [text, 1, 1.5, None, True]},
        callback=CallbackSpec(("https://receiver.example/hook",), "POST", {"x-note": text.replace("\x00", "")}),
        children=TaskChildren((1,), ()) if index % 2 else None,
    )


@pytest.fixture(params=["default", "NO_BACKSLASH_ESCAPES"])
async def connection(request: pytest.FixtureRequest, mysql_url: str) -> AsyncIterator[Any]:
    kwargs = connect_kwargs(mysql_url, StorageSettings(urls=[mysql_url]))
    assert kwargs is not None
    conn = await asyncmy.connect(**kwargs)
    try:
        async with conn.cursor() as cursor:
            if request.param != "default":
                await cursor.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
            await cursor.execute("SELECT @@sql_mode")
            (mode,) = await cursor.fetchone()
            assert ("NO_BACKSLASH_ESCAPES" in mode) == (request.param != "default")
        yield conn
    finally:
        conn.close()


async def test_each_awkward_string_reads_back_as_it_was(connection: Any) -> None:
    rows = TaskRows(connection.escape_string)
    async with connection.cursor() as cursor:
        await cursor.execute("SELECT " + ", ".join(rows.quoted(text) for text in AWKWARD))
        assert list(await cursor.fetchone()) == AWKWARD


async def test_a_row_reads_the_values_asyncmy_would_have_sent(connection: Any) -> None:
    rows = TaskRows(connection.escape_string)
    async with connection.cursor() as cursor:
        for index, text in enumerate(AWKWARD):
            task = awkward_task(index, text)
            literal = rows.row(task)
            await cursor.execute("SELECT " + literal[1:-1])
            written = await cursor.fetchone()
            await cursor.execute("SELECT " + TASK_ROW[1:-1], task_values(task))
            assert written == await cursor.fetchone()
            assert written[0] == task.id and written[2] == task.name


def test_a_value_of_the_wrong_type_is_refused_not_written() -> None:
    rows = TaskRows(lambda text: text)
    with pytest.raises(TypeError):
        rows.quoted(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        rows.row(replace(make_task(), version=1.5))  # type: ignore[arg-type]


@pytest.fixture
async def store(mysql_url: str) -> AsyncIterator[SQLAlchemyTaskStore]:
    settings = await fresh_mariadb(mariadb_settings(mysql_url))  # as migrated, in ~0.1 s
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        yield store
    finally:
        await store.close()
        release_mariadb(settings)


@pytest.mark.parametrize("round_trip_chars", [sql_direct.ROUND_TRIP_BYTES, 2000])
async def test_a_batch_of_awkward_tasks_reads_back_equal(
    store: SQLAlchemyTaskStore, round_trip_chars: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_direct, "ROUND_TRIP_BYTES", round_trip_chars)
    batch = [awkward_task(index, text) for index, text in enumerate(AWKWARD * 3)]
    batch = [replace(task, key=None) if index >= len(AWKWARD) else task for index, task in enumerate(batch)]
    assert await store.insert_tasks(batch) == batch
    for task in batch:
        assert await store.get_task(task.id) == task
