"""Runs' reports that arrive together (:meth:`RunRecords.decide_run`, called concurrently): each caller gets its
own answer, as if alone, and on MariaDB they share one transaction (issue 30: a report was three statements,
the read, its ``UPDATE`` and the ``COMMIT``; grouped, the read and the ``COMMIT`` are one a group). A group is
group commit, not write-behind: no caller is answered before the group's ``COMMIT`` returned."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from testkit.databases import connect_mysql
from tests.contract.backends import NOW_MS, RUN_DEADLINE_MS, count_statements, fire_running, make_task
from tjobs.errors import RunConflict, StaleShardMap
from tjobs.model import Flow, FlowRun, FlowStatus, FlowUpdate, Reschedule, RunStatus, Task
from tjobs.specs import FixedDelaySpec
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.runs import RunWrite
from tjobs.stores.shard_fence import fence_table_sql

DEADLINE_MS = RUN_DEADLINE_MS
ENDED_MS = NOW_MS + 500


def _succeeded(flow: Flow, result: Any) -> FlowUpdate:
    run = FlowRun(RunStatus.SUCCEEDED, 1, NOW_MS + 10, DEADLINE_MS, ENDED_MS, ENDED_MS, 100, result)
    return FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, run=run)


def _end(flow: Flow, seen: list[Flow | None]) -> Any:
    def decide(read: Flow | None, task: Task | None) -> RunWrite:
        seen.append(read)
        return RunWrite(FlowStatus.RUNNING, _succeeded(flow, {"task": flow.task_id}), ENDED_MS, 1)

    return decide


def _run_pool(store: TaskStore) -> Any | None:
    pools: dict[str, Any] | None = getattr(store, "_run_pools", None)
    if not pools:
        return None
    [pool] = pools.values()  # the contract topology is on one server
    return pool


async def test_reports_of_flows_of_many_tables_sent_together_each_land(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # eight runs in eight shard tables of both logical databases, their final reports sent at once
    flows = [(await fire_running(store, shard))[1] for shard in range(1, 16, 2)]
    pool = _run_pool(store)
    counted = count_statements(pool, monkeypatch) if pool is not None else []
    seen: list[list[Flow | None]] = [[] for _ in flows]

    written = await asyncio.gather(
        *(store.decide_run(f.task_id, f.scheduled_at_ms, _end(f, s)) for f, s in zip(flows, seen, strict=True))
    )

    assert written == [True] * len(flows)
    for flow, reads in zip(flows, seen, strict=True):
        [read] = reads  # each decided once, on its own flow as stored
        assert read is not None and read.id == flow.id and read.status is FlowStatus.RUNNING
        stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
        assert stored is not None and stored.status is FlowStatus.DELIVERED and stored.updated_at_ms == ENDED_MS
        assert stored.run is not None and stored.run.result == {"task": flow.task_id}
    if pool is not None:
        # MariaDB: one transaction, one read and one COMMIT for the eight; an UPDATE each (eight tables)
        assert counted == [{"Com_select": 1, "Com_update": len(flows), "Com_commit": 1}]


async def test_reports_sent_together_get_each_its_own_answer(store: TaskStore) -> None:
    # one written, one refused by its guard, one deciding nothing, one raising, one of no flow: in one group
    flows = [(await fire_running(store, shard))[1] for shard in (1, 6, 11, 12)]
    written, refused, nothing, raising = flows
    seen: list[Flow | None] = []

    def refuse(read: Flow | None, task: Task | None) -> RunWrite:
        raise RunConflict("run_finished", "no", {})

    def missing(read: Flow | None, task: Task | None) -> None:
        assert (read, task) == (None, None)

    stale = RunWrite(FlowStatus.SENDING, _succeeded(refused, {}), ENDED_MS, 1)
    answers = await asyncio.gather(
        store.decide_run(written.task_id, written.scheduled_at_ms, _end(written, seen)),
        store.decide_run(refused.task_id, refused.scheduled_at_ms, lambda read, task: stale),
        store.decide_run(nothing.task_id, nothing.scheduled_at_ms, lambda read, task: None),
        store.decide_run(raising.task_id, raising.scheduled_at_ms, refuse),
        store.decide_run(written.task_id, written.scheduled_at_ms + 1, missing),
        return_exceptions=True,
    )

    assert list(answers[:3]) == [True, False, False] and answers[4] is False
    assert isinstance(answers[3], RunConflict)
    stored = {f.id: await store.get_flow(f.task_id, f.scheduled_at_ms) for f in flows}
    assert [None if s is None else s.status for s in stored.values()] == [
        FlowStatus.DELIVERED,
        FlowStatus.RUNNING,
        FlowStatus.RUNNING,
        FlowStatus.RUNNING,
    ]
    # the flows left as they were are free again: a report of each lands at once (MariaDB: no lock kept)
    async with asyncio.timeout(5):
        assert await asyncio.gather(
            *(store.decide_run(f.task_id, f.scheduled_at_ms, _end(f, [])) for f in (refused, nothing, raising))
        ) == [True, True, True]


async def test_reports_of_one_flow_sent_together_end_its_run_once(store: TaskStore) -> None:
    _, flow = await fire_running(store, shard=3)
    _, other = await fire_running(store, shard=4)

    def end_if_running(read: Flow | None, task: Task | None) -> RunWrite | None:
        if read is None or read.status is not FlowStatus.RUNNING:
            return None
        return RunWrite(FlowStatus.RUNNING, _succeeded(read, {}), ENDED_MS, 1)

    answers = await asyncio.gather(
        *(store.decide_run(flow.task_id, flow.scheduled_at_ms, end_if_running) for _ in range(3)),
        store.decide_run(other.task_id, other.scheduled_at_ms, end_if_running),
        *(store.decide_run(flow.task_id, flow.scheduled_at_ms, end_if_running) for _ in range(3)),
    )

    assert answers[3] is True and sorted(answers[:3] + answers[4:]) == [False] * 5 + [True]


async def test_fixed_delay_runs_ended_together_set_their_next_runs(store: TaskStore) -> None:
    ended: list[tuple[Flow, FlowUpdate]] = []
    for shard in (5, 13):
        task = replace(make_task(shard=shard), schedule=FixedDelaySpec(30_000, start_at_ms=NOW_MS))
        fired, flow = await fire_running(store, shard, task=task)
        assert fired.next_run_at_ms is not None
        moved = Reschedule(fired.app_id, fired.next_run_at_ms, fired.version, ENDED_MS + 30_000 + shard)
        ended.append((flow, replace(_succeeded(flow, {}), reschedule=moved)))
    _, plain = await fire_running(store, shard=7)

    def ending(update: FlowUpdate) -> Any:
        return lambda read, task: RunWrite(FlowStatus.RUNNING, update, ENDED_MS, 1)

    answers = await asyncio.gather(
        *(store.decide_run(f.task_id, f.scheduled_at_ms, ending(u)) for f, u in ended),
        store.decide_run(plain.task_id, plain.scheduled_at_ms, _end(plain, [])),
    )

    assert answers == [True, True, True]
    for (flow, _), shard in zip(ended, (5, 13), strict=True):
        stored = await store.get_task(flow.task_id)
        assert stored is not None and stored.next_run_at_ms == ENDED_MS + 30_000 + shard


async def test_mariadb_refuses_reports_sent_together_under_an_older_shard_map(store: TaskStore) -> None:
    # a group's read passes the fence of each database it reads, as one report's does
    pool = _run_pool(store)
    if pool is None:
        pytest.skip("MariaDB's run pool only")
    flows = [(await fire_running(store, shard))[1] for shard in (2, 9, 14)]
    home = store._shard_of_task(flows[1].task_id)  # type: ignore[attr-defined]
    probe = connect_mysql(home.database.engine_url, autocommit=True)
    fence = fence_table_sql(home.database)
    try:
        with probe.cursor() as cursor:
            cursor.execute(f"UPDATE {fence} SET epoch = 7 WHERE id = 1")
        answers = await asyncio.gather(
            *(store.decide_run(f.task_id, f.scheduled_at_ms, _end(f, [])) for f in flows), return_exceptions=True
        )
    finally:
        with probe.cursor() as cursor:
            cursor.execute(f"UPDATE {fence} SET epoch = 0 WHERE id = 1")
        probe.close()

    # the refused database's report refused; the others, in the other database or not, as alone
    refused = [i for i, answer in enumerate(answers) if isinstance(answer, StaleShardMap)]
    assert refused == [1]
    for index, (flow, answer) in enumerate(zip(flows, answers, strict=True)):
        stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
        assert stored is not None
        if index in refused:
            assert stored.status is FlowStatus.RUNNING
        else:
            assert answer is True and stored.status is FlowStatus.DELIVERED


LOCK_WAIT_ERRNO = 1205  # NOWAIT's refusal: the row is locked


async def test_mariadb_locks_a_groups_fences_before_its_flows(store: TaskStore) -> None:
    # as every write of several databases does (the fences first, in database order): a group that held a flow
    # and waited for a fence behind a move's UPDATE of it could close a cycle with a flush holding that fence
    if _run_pool(store) is None:
        pytest.skip("MariaDB's run pool only")
    flows = [(await fire_running(store, shard))[1] for shard in (2, 14)]  # two databases; shard 2's flow read first
    first, last = (store._shard_of_task(f.task_id) for f in flows)  # type: ignore[attr-defined]
    assert first.database.index < last.database.index
    holder = connect_mysql(first.database.engine_url, autocommit=False)
    probe = connect_mysql(first.database.engine_url, autocommit=True)
    fence = "none"
    try:
        with holder.cursor() as cursor:
            where = "task_id = %s AND scheduled_at = %s FOR UPDATE"
            cursor.execute(
                f"SELECT 1 FROM {first.flows_sql} WHERE {where}", (flows[0].task_id, flows[0].scheduled_at_ms)
            )
            cursor.fetchall()
        group = asyncio.gather(*(store.decide_run(f.task_id, f.scheduled_at_ms, lambda r, t: None) for f in flows))
        for _ in range(30):  # 1.5 s, within the group's 2-s lock wait
            await asyncio.sleep(0.05)
            with probe.cursor() as cursor:
                try:  # the fence of the database read last, taken while the group waits for the first flow
                    cursor.execute(f"SELECT 1 FROM {fence_table_sql(last.database)} WHERE id = 1 FOR UPDATE NOWAIT")
                    cursor.fetchall()
                except Exception as error:
                    if getattr(error, "args", (None,))[0] != LOCK_WAIT_ERRNO:
                        raise
                    fence = "held"
                    break
        holder.rollback()
        assert await group == [False, False]
    finally:
        holder.close()
        probe.close()

    assert fence == "held"


def _locked(probe: Any, table: str, where: str, params: tuple[int, ...]) -> bool:
    """Whether another session holds a lock on the row (the probe is in autocommit: its own ends at once)."""
    with probe.cursor() as cursor:
        try:
            cursor.execute(f"SELECT 1 FROM {table} WHERE {where} FOR UPDATE NOWAIT", params)
            cursor.fetchall()
        except Exception as error:
            if getattr(error, "args", (None,))[0] != LOCK_WAIT_ERRNO:
                raise
            return True
    return False


async def test_mariadb_a_group_locks_its_flows_and_not_their_tasks(store: TaskStore) -> None:
    # as one report's read: a fire of a task never waits for a report of its run
    if _run_pool(store) is None:
        pytest.skip("MariaDB's run pool only")
    pairs = [await fire_running(store, shard) for shard in (3, 12)]
    probe = connect_mysql(store._shard_of_task(pairs[0][1].task_id).database.engine_url, autocommit=True)  # type: ignore[attr-defined]
    seen: list[dict[str, bool]] = []

    def look(read: Flow | None, task: Task | None) -> None:
        for held_task, flow in pairs:
            home = store._shard_of_task(flow.task_id)  # type: ignore[attr-defined]
            key = (flow.task_id, flow.scheduled_at_ms)
            seen.append(
                {
                    "flow": _locked(probe, home.flows_sql, "task_id = %s AND scheduled_at = %s", key),
                    "task": _locked(probe, home.tasks_sql, "id = %s", (held_task.id,)),
                }
            )

    try:
        answers = await asyncio.gather(*(store.decide_run(f.task_id, f.scheduled_at_ms, look) for _, f in pairs))
    finally:
        probe.close()

    assert answers == [False, False]
    assert seen == [{"flow": True, "task": False}] * 4  # each decide sees both flows locked, neither task


async def test_mariadb_a_group_refuses_a_report_made_under_an_older_shard_map_than_its_fence(store: TaskStore) -> None:
    # two reports grouped, resolved under two shard maps (the node's map moved between them): the one of the
    # older map is refused by its database's fence, now at the newer epoch, as it would be alone; the group's
    # read must not pass it under the newer epoch its other report carries
    from tjobs.stores import sql_run_writes

    pool = _run_pool(store)
    if pool is None:
        pytest.skip("MariaDB's run pool only")
    flows = [(await fire_running(store, shard))[1] for shard in (2, 9)]
    homes = [store._shard_of_task(f.task_id) for f in flows]  # type: ignore[attr-defined]
    assert homes[0].database.index != homes[1].database.index
    probe = connect_mysql(homes[1].database.engine_url, autocommit=True)
    fence = fence_table_sql(homes[1].database)
    try:
        with probe.cursor() as cursor:
            cursor.execute(f"UPDATE {fence} SET epoch = 7 WHERE id = 1")

        async def report(flow: Flow, home: Any, epoch: int) -> bool:  # as the store sends one, its errors mapped
            async with store._direct_call(home.database.engine_url):  # type: ignore[attr-defined]
                return await sql_run_writes.decide_run(
                    pool, home, epoch, flow.task_id, flow.scheduled_at_ms, _end(flow, [])
                )

        answers = await asyncio.gather(
            *(report(f, home, epoch) for f, home, epoch in zip(flows, homes, (7, 6), strict=True)),
            return_exceptions=True,
        )
    finally:
        with probe.cursor() as cursor:
            cursor.execute(f"UPDATE {fence} SET epoch = 0 WHERE id = 1")
        probe.close()

    assert answers[0] is True
    assert isinstance(answers[1], StaleShardMap), answers[1]
    stored = await store.get_flow(flows[1].task_id, flows[1].scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.RUNNING
