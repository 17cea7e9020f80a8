"""Each hot statement of the SQL store is written once (issue 26): SQLite runs MariaDB's text for task
creates (with their references) and delivery outcomes, with sqlite3's ``?`` for asyncmy's ``%s``, and
MariaDB's text stays as it was written for speed (pinned here). What the statements do is the store
contract's (tests/contract, on the twin, SQLite and MariaDB)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from tests.contract.backends import NOW_MS, make_task, manual_flow
from tjobs.model import FlowStatus, FlowUpdate
from tjobs.settings import StorageSettings
from tjobs.specs import CallbackSpec
from tjobs.stores.migrate import migrate
from tjobs.stores.sql_direct import REFERENCE_ROW, TASK_ROW, reference_insert_head, task_insert_head, task_insert_sql
from tjobs.stores.sql_flow_updates import update_statements
from tjobs.stores.sql_layout import Layout
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

TOPOLOGY = "2x2x4"  # the contract suite's: make_task mints ids for its 16 shards


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[tuple[SQLAlchemyTaskStore, list[str]]]:
    """A migrated SQLite store, and every statement its engines send from now on."""
    settings = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path}"], topology=TOPOLOGY)
    await migrate(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    for engine in {*store._engines.values(), *store._writers.values()}:
        event.listen(engine.sync_engine, "before_cursor_execute", record)
    yield store, sent
    await store.close()


async def test_sqlite_creates_a_task_and_its_references_with_the_mariadb_statements(
    sqlite_store: tuple[SQLAlchemyTaskStore, list[str]],
) -> None:
    store, sent = sqlite_store
    task = make_task()
    task = replace(task, callback=CallbackSpec((), "POST", {}, targets=("orders", "audit")))
    home = store._shard_of_task(task.id)
    assert home is not None

    await store.insert_task(task)

    assert task_insert_sql(home.tasks_sql).replace("%s", "?") in sent
    assert (reference_insert_head(home.task_targets_sql) + REFERENCE_ROW).replace("%s", "?") in sent
    assert await store.get_task(task.id) == task
    assert await store.count_target_references(task.app_id, "audit") == 1


async def test_sqlite_records_outcomes_with_the_mariadb_statements(
    sqlite_store: tuple[SQLAlchemyTaskStore, list[str]],
) -> None:
    store, sent = sqlite_store
    task = await store.insert_task(make_task(shard=3))
    for offset in (1, 2):
        await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS + offset))
    updates = [  # two rows of one task: the CASE on (task_id, scheduled_at), the open row's guard
        FlowUpdate(task.id, NOW_MS + 1, FlowStatus.DELIVERED, 1, None, 204, None),
        FlowUpdate(task.id, NOW_MS + 2, FlowStatus.PENDING, 1, NOW_MS + 500, 503, "busy"),
    ]
    sent.clear()

    await store.record_flow_updates(updates, NOW_MS + 50)

    ((mariadb_sql, _),) = update_statements({3: updates}, store.layout.shards, NOW_MS + 50)
    assert mariadb_sql.replace("%s", "?") in sent
    flows = {flow.scheduled_at_ms - NOW_MS: flow for flow in await store.list_flows(task.id, 10)}
    assert (flows[1].status, flows[1].last_status_code) == (FlowStatus.DELIVERED, 204)
    assert (flows[2].status, flows[2].attempts, flows[2].last_error) == (FlowStatus.PENDING, 1, "busy")


def test_the_mariadb_insert_text_is_the_one_written_for_speed() -> None:
    settings = StorageSettings(urls=["mysql+asyncmy://root@127.0.0.1:3306/"], topology="1x1x2", database_prefix="p")
    home = Layout(settings).shards[1]
    columns = (
        "id, app_id, name, idem_key, status, next_run_at, version, fire_count, schedule, callback, payload, "
        "misfire_policy, delivery, created_at, updated_at, revision, children"
    )
    marks = ", ".join(["%s"] * 17)
    single = f"INSERT INTO `p_00`.`tasks_01` ({columns}) VALUES ({marks})"
    assert task_insert_sql(home.tasks_sql) == task_insert_head(home.tasks_sql) + TASK_ROW == single
    references = reference_insert_head(home.task_targets_sql) + ", ".join([REFERENCE_ROW] * 2)
    assert (
        references == "INSERT INTO `p_00`.`task_targets_01` (app_id, target, task_id) VALUES (%s, %s, %s), (%s, %s, %s)"
    )
