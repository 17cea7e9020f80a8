"""A run's path makes MariaDB create no temporary table (issue 30): its task's creation, its fire, its start and
its report, counted
by the server itself (``Created_tmp_tables`` of ``SHOW SESSION STATUS``) on the store's own connections, read
before and after on those same connections, so other clients of the server do not count. The run-reports bench
had measured 1.02 a run: the shard-map fence's check was a correlated subquery, which MariaDB's subquery cache
(an in-memory temporary table) wrapped at each execution. Memory and SQLite have no such counter: MariaDB only."""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.backends import NOW_MS, intent_of, interval_planner, make_task
from tjobs.model import FlowRun, FlowStatus, FlowUpdate, RunStatus
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.runs import RunWrite

_POOLS = ("_direct", "_fire_pools", "_run_pools")  # the API's, the fires' and outcomes', the reports'
DEADLINE_MS = NOW_MS + 60_000


async def _temp_tables(store: TaskStore) -> dict[str, int]:
    """``Created_tmp_tables`` of each of the store's MariaDB pools' one connection (asserted: one)."""
    counted: dict[str, int] = {}
    for attribute in _POOLS:
        pools: dict[str, Any] | None = getattr(store, attribute, None)
        if not pools:
            pytest.skip("MariaDB's pools only: their session counters")
        [pool] = pools.values()  # the contract topology is on one server
        async with pool.transaction() as conn:
            cursor = conn.cursor()
            await cursor.execute("SHOW SESSION STATUS LIKE 'Created_tmp_tables'")
            [(_, value)] = await cursor.fetchall()
            await cursor.close()
        assert (pool._pool.size, pool._pool.freesize) == (1, 1)  # one connection: what it counted is ours
        counted[attribute] = int(value)
    return counted


async def _made(store: TaskStore, before: dict[str, int]) -> dict[str, int]:
    after = await _temp_tables(store)
    return {pool: after[pool] - before[pool] for pool in _POOLS}


async def test_mariadb_fires_starts_and_reports_a_run_without_a_temporary_table(store: TaskStore) -> None:
    await _temp_tables(store)  # each pool's connection opened before the count starts
    before = await _temp_tables(store)
    task = await store.insert_task(make_task(shard=5))
    created = await _made(store, before)
    # one database's fence (before: a correlated subquery, one temporary table), then a task each shard: the fire
    # transaction's locking read a UNION ALL over tables, its fence one over databases (before too: none)
    others = [await store.insert_task(make_task(shard=shard)) for shard in store.topology.shards() if shard != 5]

    before = await _temp_tables(store)
    [outcome] = await store.commit_fires([intent_of(task)], NOW_MS, interval_planner)
    [flow] = outcome.flows
    fired = await _made(store, before)

    before = await _temp_tables(store)
    outcomes = await store.commit_fires([intent_of(t) for t in others], NOW_MS, interval_planner)
    assert all(outcome.committed and outcome.flows for outcome in outcomes)
    fired_across = await _made(store, before)

    before = await _temp_tables(store)
    run = FlowRun(RunStatus.RUNNING, 1, NOW_MS + 10, DEADLINE_MS)
    started = FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.RUNNING, 1, DEADLINE_MS, 202, run=run)
    await store.record_flow_updates([started], NOW_MS + 10)
    run_started = await _made(store, before)

    before = await _temp_tables(store)
    ended = FlowRun(RunStatus.SUCCEEDED, 1, NOW_MS + 10, DEADLINE_MS, NOW_MS + 500, NOW_MS + 500, 100, None)
    end = FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, run=ended)
    write = RunWrite(FlowStatus.RUNNING, end, NOW_MS + 500, 1)
    assert await store.decide_run(flow.task_id, flow.scheduled_at_ms, lambda read, task: write)
    reported = await _made(store, before)

    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.DELIVERED  # the path ran to its end
    nothing = dict.fromkeys(_POOLS, 0)
    made = {"create": created, "fire": fired, "fire across": fired_across, "run start": run_started}
    assert {**made, "report": reported} == {
        "create": nothing,
        "fire": nothing,
        "fire across": nothing,
        "run start": nothing,
        "report": nothing,
    }
