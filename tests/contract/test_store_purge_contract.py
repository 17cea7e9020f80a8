"""Retention's purge (:meth:`tjobs.stores.contracts.TaskRecords.purge`) on every backend: exactly the
terminal flows scheduled before the cut-off go, oldest first, never an open one however old; and on
MariaDB a purge's transaction examines rows in proportion to what it deletes, not the table (migration
0025's index; before it, the read walked every terminal flow of the table along ``retry``:
docs/operations.md, "Capacity model"); the same for the completed tasks, oldest first along
``tasks_TT_done`` (migration 0026; before it, the read walked every completed task of the table along
``due``, whose ``next_run_at`` is NULL for them)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from tests.contract.backends import NOW_MS, make_task, manual_flow, measure_writes
from tjobs.model import FlowStatus, TaskStatus
from tjobs.settings import StorageSettings
from tjobs.stores.base import TaskStore
from tjobs.stores.sql_layout import create_engine_for
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

SHARD = 5
OPEN = [s for s in FlowStatus if not s.terminal]
ENDED = [s for s in FlowStatus if s.terminal]


async def test_purge_removes_exactly_the_terminal_flows_older_than_the_cutoff_oldest_first(store: TaskStore) -> None:
    task = await store.insert_task(make_task(shard=SHARD))
    cutoff = NOW_MS
    # every status four times: a day before the cut-off, a second before it, at it, a second after it
    for index, status in enumerate(FlowStatus):
        for offset in (-86_400_000, -1000, 0, 1000):
            await store.insert_manual_flow(task.id, manual_flow(task, cutoff + offset + index, status))
    old_ended = sorted(f.scheduled_at_ms for f in await store.list_flows(task.id, 100) if _old_ended(f, cutoff))
    assert len(old_ended) == 2 * len(ENDED)

    # a batch smaller than what is old enough takes the oldest
    assert await store.purge(SHARD, cutoff, 3) == 3
    left = {f.scheduled_at_ms for f in await store.list_flows(task.id, 100)}
    assert left.isdisjoint(old_ended[:3]) and left.issuperset(old_ended[3:])

    while (count := await store.purge(SHARD, cutoff, 4)) > 0:
        assert count <= 4
    kept = [(f.scheduled_at_ms, f.status) for f in await store.list_flows(task.id, 100)]
    # every open flow stays, however old; every flow at or after the cut-off stays; nothing else
    assert sorted(status for at, status in kept if at < cutoff) == sorted(OPEN * 2)
    assert sorted(status for at, status in kept if at >= cutoff) == sorted(list(FlowStatus) * 2)
    assert await store.get_task(task.id) is not None


async def test_purge_with_nothing_old_enough_deletes_nothing(store: TaskStore) -> None:
    task = await store.insert_task(make_task(shard=SHARD))
    for offset, status in enumerate(ENDED):
        await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS + offset, status))
    assert await store.purge(SHARD, NOW_MS, 100) == 0
    assert len(await store.list_flows(task.id, 100)) == len(ENDED)


async def test_purge_removes_the_completed_tasks_older_than_the_cutoff_oldest_first(store: TaskStore) -> None:
    cutoff = NOW_MS
    # completed tasks stored newest first (ids rise as the instants fall), so oldest first is not id order
    done = []
    for age in (1, 5, 2, 4, 3, 0):
        task = make_task(shard=SHARD, status=TaskStatus.COMPLETED, next_run_at_ms=None)
        done.append(await store.insert_task(replace(task, updated_at_ms=cutoff - 1000 * age)))
    fresh = await store.insert_task(
        replace(make_task(shard=SHARD, status=TaskStatus.COMPLETED, next_run_at_ms=None), updated_at_ms=cutoff)
    )
    others = [
        await store.insert_task(replace(make_task(shard=SHARD, status=status), updated_at_ms=cutoff - 10_000))
        for status in (TaskStatus.ACTIVE, TaskStatus.PAUSED)
    ]
    by_age = sorted((t for t in done if t.updated_at_ms < cutoff), key=lambda t: t.updated_at_ms)

    assert await store.purge(SHARD, cutoff, 2) == 2
    assert [await store.get_task(t.id) for t in by_age[:2]] == [None, None]
    assert None not in [await store.get_task(t.id) for t in by_age[2:]]
    while (count := await store.purge(SHARD, cutoff, 2)) > 0:
        assert count <= 2
    assert [await store.get_task(t.id) for t in by_age] == [None] * len(by_age)
    assert None not in [await store.get_task(t.id) for t in [fresh, *others]]


def _old_ended(flow: Any, cutoff: int) -> bool:
    return bool(flow.status.terminal and flow.scheduled_at_ms < cutoff)


# ---- MariaDB: what the purge's read examines --------------------------------------------------------


async def _fill(store: SQLAlchemyTaskStore, settings: StorageSettings, first_at: int, count: int, status: str) -> None:
    """``count`` flows of one task in ``SHARD``'s table, scheduled 1 ms apart from ``first_at``."""
    home = store.layout.shards[SHARD]
    engine = create_engine_for(home.database.engine_url, settings)
    try:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(
                f"INSERT INTO {home.flows_sql} (task_id, scheduled_at, app_id, kind, status, attempts, "
                "next_attempt_at, missed, created_at, updated_at) "
                f"SELECT 42, {first_at} + seq, 'app-a', 'scheduled', '{status}', 1, NULL, 0, {first_at}, {first_at} "
                f"FROM `{home.database.name}`.seq_0_to_{count - 1}"  # the Sequence engine's table of 0 .. count - 1
            )
    finally:
        await engine.dispose()


@pytest.mark.mariadb
async def test_what_a_purge_examines_is_bounded_by_what_it_deletes_not_by_the_table(
    mariadb_store: SQLAlchemyTaskStore, mariadb_store_settings: StorageSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = measure_writes(monkeypatch)
    assert await mariadb_store.purge(SHARD, NOW_MS, 200) == 0  # an empty table
    empty = reads[-1]

    # 20,000 delivered flows, every one newer than the cut-off, and 300 open ones older than it
    await _fill(mariadb_store, mariadb_store_settings, NOW_MS, 20_000, FlowStatus.DELIVERED.value)
    await _fill(mariadb_store, mariadb_store_settings, NOW_MS - 10_000, 300, FlowStatus.PENDING.value)
    assert await mariadb_store.purge(SHARD, NOW_MS, 200) == 0
    assert reads[-1] <= empty + 300 + 10, f"the purge examined {reads[-1]} rows (empty table: {empty})"

    # 500 delivered flows old enough: a batch of 200 reads and deletes those 200, nothing else
    await _fill(mariadb_store, mariadb_store_settings, NOW_MS - 20_000, 500, FlowStatus.DELIVERED.value)
    assert await mariadb_store.purge(SHARD, NOW_MS, 200) == 200
    assert reads[-1] <= empty + 3 * 200 + 10, f"the purge examined {reads[-1]} rows (empty table: {empty})"


async def _fill_completed(
    store: SQLAlchemyTaskStore, settings: StorageSettings, first_at: int, count: int, first_id: int
) -> None:
    """``count`` completed tasks in ``SHARD``'s table, last updated 1 ms apart from ``first_at``."""
    home = store.layout.shards[SHARD]
    engine = create_engine_for(home.database.engine_url, settings)
    try:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(
                f"INSERT INTO {home.tasks_sql} (id, app_id, name, idem_key, status, next_run_at, version, "
                "fire_count, schedule, callback, payload, misfire_policy, delivery, created_at, updated_at) "
                f"SELECT {first_id} + seq, 'app-a', 't', NULL, 'completed', NULL, 2, 1, "
                "'{\"kind\": \"once\", \"at_ms\": 1}', '{}', '{}', 'fire_once', 'http', "
                f"{first_at}, {first_at} + seq FROM `{home.database.name}`.seq_0_to_{count - 1}"
            )
    finally:
        await engine.dispose()


@pytest.mark.mariadb
async def test_what_a_purge_of_completed_tasks_examines_is_bounded_by_what_it_deletes(
    mariadb_store: SQLAlchemyTaskStore, mariadb_store_settings: StorageSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = measure_writes(monkeypatch)
    assert await mariadb_store.purge(SHARD, NOW_MS, 200) == 0  # an empty table
    empty = reads[-1]

    # 20,000 completed tasks, every one updated at or after the cut-off: nothing to read but one probe
    await _fill_completed(mariadb_store, mariadb_store_settings, NOW_MS, 20_000, 10**12)
    assert await mariadb_store.purge(SHARD, NOW_MS, 200) == 0
    assert reads[-1] <= empty + 10, f"the purge examined {reads[-1]} rows (empty table: {empty})"

    # 500 completed tasks old enough: a batch of 200 reads and deletes those 200, nothing else
    await _fill_completed(mariadb_store, mariadb_store_settings, NOW_MS - 20_000, 500, 2 * 10**12)
    assert await mariadb_store.purge(SHARD, NOW_MS, 200) == 200
    assert reads[-1] <= empty + 3 * 200 + 10, f"the purge examined {reads[-1]} rows (empty table: {empty})"


# ---- SQLite: the plan of the purge's read -----------------------------------------------------------


async def _purge_read_plan(settings: StorageSettings, condition: str) -> tuple[str, Any]:
    """SQLite's ``EXPLAIN QUERY PLAN`` of the purge's first ``SELECT`` holding ``condition``, joined by
    " / ", with the shard's layout (its table names)."""
    from tests.contract.backends import wipe

    await wipe(settings)
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and condition in statement:
            sent.append((statement, parameters))

    store = SQLAlchemyTaskStore(settings)
    await store.start()
    event.listen(Engine, "before_cursor_execute", record)
    try:
        await store.purge(SHARD, NOW_MS, 200)
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    try:
        statement, parameters = sent[0]
        home = store.layout.shards[SHARD]
        engine = create_engine_for(home.database.engine_url, settings)
        try:
            async with engine.connect() as conn:
                plan = (await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)).all()
        finally:
            await engine.dispose()
    finally:
        await store.close()
    return " / ".join(str(row[-1]) for row in plan), home


async def test_on_sqlite_the_purge_reads_the_flows_along_their_instant(sqlite_store_settings: StorageSettings) -> None:
    """SQLite's planner took ``retry`` for the status list and sorted every terminal flow; the read must
    search ``flows_TT_at`` (scheduled_at < ?) and stop at the limit."""
    details, home = await _purge_read_plan(sqlite_store_settings, "scheduled_at <")
    assert f"USING INDEX {home.flows.name}_at (scheduled_at<?)" in details, details
    assert "TEMP B-TREE" not in details, details


async def test_on_sqlite_the_purge_reads_the_completed_tasks_along_their_last_update(
    sqlite_store_settings: StorageSettings,
) -> None:
    """The completed tasks' read must search ``tasks_TT_done`` (the completed tasks by ``updated_at``), not
    walk every completed task along ``due`` (status, next_run_at)."""
    details, home = await _purge_read_plan(sqlite_store_settings, "updated_at <")
    assert f"USING INDEX {home.tasks.name}_done (updated_at<?)" in details, details
    assert "TEMP B-TREE" not in details, details
