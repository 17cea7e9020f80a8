"""A run's report read and written in one call (:meth:`RunRecords.decide_run`) on every backend: ``decide``
gets the flow with its task as stored, what it returns is written where the flow is still as read, what it
raises is raised with nothing written, and of two racing callers only one ends the run (issue 30: MariaDB
reads under the row's lock in the write's transaction)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pymysql
import pytest

from testkit.databases import connect_mysql
from tests.contract.backends import NOW_MS, RUN_DEADLINE_MS, count_statements, fire_running, make_task
from tjobs.errors import RunConflict
from tjobs.model import Flow, FlowRun, FlowStatus, FlowUpdate, Reschedule, RunStatus, Task
from tjobs.specs import FixedDelaySpec
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.runs import RunWrite
from tjobs.stores.shard_fence import fence_table_sql

DEADLINE_MS = RUN_DEADLINE_MS


def _succeeded(flow: Flow, at_ms: int) -> FlowUpdate:
    run = FlowRun(RunStatus.SUCCEEDED, 1, NOW_MS + 10, DEADLINE_MS, at_ms, at_ms, 100, {"rows": 3})
    return FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, run=run)


async def test_decide_gets_the_flow_with_its_task_and_its_write_lands(store: TaskStore) -> None:
    task, flow = await fire_running(store, shard=1)
    seen: list[tuple[Flow | None, Task | None]] = []

    def decide(read: Flow | None, read_task: Task | None) -> RunWrite:
        seen.append((read, read_task))
        return RunWrite(FlowStatus.RUNNING, _succeeded(flow, NOW_MS + 500), NOW_MS + 500, 1)

    assert await store.decide_run(flow.task_id, flow.scheduled_at_ms, decide)

    [(read, read_task)] = seen
    assert read is not None and read.status is FlowStatus.RUNNING and read.run is not None
    assert read_task is not None and read_task.id == task.id
    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.DELIVERED and stored.updated_at_ms == NOW_MS + 500
    assert stored.run is not None and stored.run.status is RunStatus.SUCCEEDED and stored.run.result == {"rows": 3}
    assert stored.last_status_code == 202  # what the send recorded is kept


async def test_nothing_is_written_when_decide_chooses_nothing_or_raises(store: TaskStore) -> None:
    _, flow = await fire_running(store, shard=2)

    assert not await store.decide_run(flow.task_id, flow.scheduled_at_ms, lambda read, task: None)

    def refuse(read: Flow | None, task: Task | None) -> RunWrite:
        raise RunConflict("run_finished", "no", {})

    with pytest.raises(RunConflict):
        await store.decide_run(flow.task_id, flow.scheduled_at_ms, refuse)
    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.RUNNING and stored.updated_at_ms == NOW_MS + 10
    # the flow is free again: the next write lands at once (MariaDB: the row's lock was let go)
    end = RunWrite(FlowStatus.RUNNING, _succeeded(flow, NOW_MS + 600), NOW_MS + 600, 1)
    async with asyncio.timeout(5):
        assert await store.decide_run(flow.task_id, flow.scheduled_at_ms, lambda read, task: end)


async def test_a_write_where_the_flow_moved_on_is_refused(store: TaskStore) -> None:
    _, flow = await fire_running(store, shard=3)
    stale = RunWrite(FlowStatus.SENDING, _succeeded(flow, NOW_MS + 500), NOW_MS + 500, 1)

    assert not await store.decide_run(flow.task_id, flow.scheduled_at_ms, lambda read, task: stale)

    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.RUNNING


async def test_a_missing_flow_is_decided_as_none(store: TaskStore) -> None:
    _, flow = await fire_running(store, shard=4)
    seen: list[tuple[Flow | None, Task | None]] = []

    def decide(read: Flow | None, task: Task | None) -> None:
        seen.append((read, task))

    assert not await store.decide_run(flow.task_id, flow.scheduled_at_ms + 1, decide)
    assert not await store.decide_run(-1, flow.scheduled_at_ms, decide)
    assert seen == [(None, None), (None, None)]


async def test_a_fixed_delay_runs_end_sets_the_next_run_in_the_same_write(store: TaskStore) -> None:
    task = replace(make_task(shard=5), schedule=FixedDelaySpec(30_000, start_at_ms=NOW_MS))
    fired, flow = await fire_running(store, shard=5, task=task)
    assert fired.next_run_at_ms is not None
    moved = Reschedule(fired.app_id, fired.next_run_at_ms, fired.version, NOW_MS + 500 + 30_000)
    ended = replace(_succeeded(flow, NOW_MS + 500), reschedule=moved)

    assert await store.decide_run(
        flow.task_id, flow.scheduled_at_ms, lambda read, t: RunWrite(FlowStatus.RUNNING, ended, NOW_MS + 500, 1)
    )

    stored = await store.get_task(task.id)
    assert stored is not None and stored.next_run_at_ms == NOW_MS + 500 + 30_000


async def test_of_two_racing_reports_one_ends_the_run(store: TaskStore) -> None:
    _, flow = await fire_running(store, shard=6)

    def end_if_running(read: Flow | None, task: Task | None) -> RunWrite | None:
        if read is None or read.status is not FlowStatus.RUNNING:
            return None
        return RunWrite(FlowStatus.RUNNING, _succeeded(flow, NOW_MS + 700), NOW_MS + 700, 1)

    results = await asyncio.gather(
        *(store.decide_run(flow.task_id, flow.scheduled_at_ms, end_if_running) for _ in range(4))
    )

    assert sorted(results) == [False, False, False, True]
    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.DELIVERED


async def test_mariadb_keeps_a_reports_connection_for_the_next(store: TaskStore) -> None:
    # each report ends its transaction in its last round trip; its connection goes back to the pool (a
    # connection opened per report cost a sixth of a report's node CPU)
    pools = getattr(store, "_run_pools", None)
    if not pools:
        pytest.skip("MariaDB's run pool only")
    _, flow = await fire_running(store, shard=7)
    pool = pools[store._shard_of_task(flow.task_id).database.engine_url]  # type: ignore[attr-defined]
    writes = [
        lambda read, task: None,  # nothing chosen: rolled back
        lambda read, task: RunWrite(FlowStatus.SENDING, _succeeded(flow, NOW_MS + 800), NOW_MS + 800, 1),  # refused
        lambda read, task: RunWrite(FlowStatus.RUNNING, _succeeded(flow, NOW_MS + 900), NOW_MS + 900, 1),  # written
    ]
    for decide in writes:
        await store.decide_run(flow.task_id, flow.scheduled_at_ms, decide)
        assert (pool._pool.size, pool._pool.freesize) == (1, 1)


LOCK_WAIT_ERRNO = 1205  # NOWAIT's refusal: the row is locked


def _lock(probe: Any, table: str, where: str, params: tuple[int, ...] = ()) -> str:
    """The lock another session holds on the row: ``exclusive``, ``shared`` or ``none`` (the probe is in
    autocommit: its own lock ends at once)."""
    for mode, held in (("LOCK IN SHARE MODE", "exclusive"), ("FOR UPDATE", "shared")):
        with probe.cursor() as cursor:
            try:
                cursor.execute(f"SELECT 1 FROM {table} WHERE {where} {mode} NOWAIT", params)
                cursor.fetchall()
            except pymysql.err.OperationalError as error:
                if error.args[0] != LOCK_WAIT_ERRNO:
                    raise
                return held
    return "none"


async def test_mariadb_reads_a_report_in_one_statement_that_locks_the_flow_and_not_its_task(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 30: the fence (shared), the flow under its row lock and its task unlocked (a fire of the task
    # never waits for a report) were three SELECTs; one now
    pools = getattr(store, "_run_pools", None)
    if not pools:
        pytest.skip("MariaDB's run pool only")
    task, flow = await fire_running(store, shard=8)
    home = store._shard_of_task(flow.task_id)  # type: ignore[attr-defined]
    counted = count_statements(pools[home.database.engine_url], monkeypatch)
    probe = connect_mysql(home.database.engine_url, autocommit=True)
    seen: list[tuple[Flow | None, Task | None, dict[str, str]]] = []

    def decide(read: Flow | None, read_task: Task | None) -> RunWrite:
        key = (flow.task_id, flow.scheduled_at_ms)
        locks = {
            "fence": _lock(probe, fence_table_sql(home.database), "id = 1"),
            "flow": _lock(probe, home.flows_sql, "task_id = %s AND scheduled_at = %s", key),
            "task": _lock(probe, home.tasks_sql, "id = %s", (task.id,)),
        }
        seen.append((read, read_task, locks))
        return RunWrite(FlowStatus.RUNNING, _succeeded(flow, NOW_MS + 500), NOW_MS + 500, 1)

    try:
        assert await store.decide_run(flow.task_id, flow.scheduled_at_ms, decide)
    finally:
        probe.close()

    [(read, read_task, locks)] = seen
    assert read is not None and read.status is FlowStatus.RUNNING and read_task == await store.get_task(task.id)
    assert locks == {"fence": "shared", "flow": "exclusive", "task": "none"}
    assert counted == [{"Com_select": 1, "Com_update": 1, "Com_commit": 1}]  # the read; the write
    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.DELIVERED


async def test_mariadb_locks_a_reports_fence_before_its_flow(store: TaskStore) -> None:
    # as every write of the database does (the fence first): a report that held the flow and waited for the
    # fence behind a move's UPDATE of it could close a cycle with a flush holding the fence
    if not getattr(store, "_run_pools", None):
        pytest.skip("MariaDB's run pool only")
    _, flow = await fire_running(store, shard=10)
    home = store._shard_of_task(flow.task_id)  # type: ignore[attr-defined]
    holder = connect_mysql(home.database.engine_url, autocommit=False)
    probe = connect_mysql(home.database.engine_url, autocommit=True)
    try:
        with holder.cursor() as cursor:
            where = "task_id = %s AND scheduled_at = %s FOR UPDATE"
            cursor.execute(f"SELECT 1 FROM {home.flows_sql} WHERE {where}", (flow.task_id, flow.scheduled_at_ms))
            cursor.fetchall()
        report = asyncio.create_task(store.decide_run(flow.task_id, flow.scheduled_at_ms, lambda read, task: None))
        fence = "none"
        for _ in range(30):  # 1.5 s, within the report's 2-s lock wait
            await asyncio.sleep(0.05)
            fence = _lock(probe, fence_table_sql(home.database), "id = 1")
            if fence != "none":
                break
        holder.rollback()
        assert not await report
    finally:
        holder.close()
        probe.close()

    assert fence == "shared"  # held while the report waited for the flow


async def test_a_flow_whose_task_was_deleted_is_decided_with_no_task(store: TaskStore) -> None:
    task, flow = await fire_running(store, shard=9)
    assert await store.delete_task(task.id)
    seen: list[tuple[Flow | None, Task | None]] = []

    def decide(read: Flow | None, read_task: Task | None) -> None:
        seen.append((read, read_task))

    assert not await store.decide_run(flow.task_id, flow.scheduled_at_ms, decide)
    [(read, read_task)] = seen
    assert read is not None and read.id == flow.id and read.status is FlowStatus.RUNNING and read_task is None
