"""Typed specs through every store: a task of every kind of schedule, and callbacks of every shape, read back
as they were stored; in the SQL stores the ``schedule`` and ``callback`` columns hold the same bytes the
store held before specs were typed, and a row written by that code reads back and survives an edit."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import select, update

from sharding import shard_of_task_id
from tests.contract.backends import make_task
from tests.unit.test_specs import CALLBACK_ROWS, SCHEDULE_ROWS
from tjobs.specs import callback_from_text, schedule_from_text
from tjobs.stores.base import TaskStore
from tjobs.stores.sql_layout import create_engine_for
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

ROWS = [(schedule, CALLBACK_ROWS[i % len(CALLBACK_ROWS)][1]) for i, (_, schedule) in enumerate(SCHEDULE_ROWS)]


async def _columns(store: SQLAlchemyTaskStore, task_id: int) -> tuple[str, str]:
    home = store.layout.shards[shard_of_task_id(task_id)]
    engine = create_engine_for(home.database.engine_url, store.settings)
    try:
        async with engine.connect() as conn:
            query = select(home.tasks.c.schedule, home.tasks.c.callback).where(home.tasks.c.id == task_id)
            row = (await conn.execute(query, execution_options=home.options)).one()
    finally:
        await engine.dispose()
    return str(row[0]), str(row[1])


async def _write_columns(store: SQLAlchemyTaskStore, task_id: int, schedule: str, callback: str) -> None:
    home = store.layout.shards[shard_of_task_id(task_id)]
    engine = create_engine_for(home.database.engine_url, store.settings)
    try:
        async with engine.begin() as conn:
            statement = (
                update(home.tasks).where(home.tasks.c.id == task_id).values(schedule=schedule, callback=callback)
            )
            await conn.execute(statement, execution_options=home.options)
    finally:
        await engine.dispose()


@pytest.mark.parametrize(("schedule", "callback"), ROWS)
async def test_a_task_of_every_kind_reads_back_with_its_specs(store: TaskStore, schedule: str, callback: str) -> None:
    task = replace(make_task(), schedule=schedule_from_text(schedule), callback=callback_from_text(callback))
    assert await store.insert_task(task) == task
    assert await store.get_task(task.id) == task
    edited = await store.edit_task(replace(task, name="renamed"), {"name"})
    assert (edited.schedule, edited.callback) == (task.schedule, task.callback)
    assert await store.get_task(task.id) == edited
    if isinstance(store, SQLAlchemyTaskStore):
        assert await _columns(store, task.id) == (schedule, callback)


async def test_a_row_written_before_specs_were_typed_reads_back_and_keeps_its_bytes_through_an_edit(
    store: TaskStore,
) -> None:
    if not isinstance(store, SQLAlchemyTaskStore):
        pytest.skip("the memory store keeps no rows from before")
    for schedule, callback in ROWS:
        task = await store.insert_task(make_task())
        await _write_columns(store, task.id, schedule, callback)
        read = await store.get_task(task.id)
        assert read is not None
        assert (read.schedule, read.callback) == (schedule_from_text(schedule), callback_from_text(callback))
        await store.edit_task(replace(read, name="renamed"), {"name"})
        assert await _columns(store, task.id) == (schedule, callback)
